"""provision-node.sh: the VM made with `qm` (a stand-in on PATH that records its arguments), CPU type host, VMID
from the address's last octet; and the refusals that stop it before any qm command."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "provision-node.sh"


def _run(tmp: Path, *args: str, vm_exists: bool = False) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    status = "exit 0" if vm_exists else "exit 2"
    (bin_dir / "qm").write_text(f'#!/bin/sh\necho "$*" >> "$QM_LOG"\n[ "$1" != status ] || {status}\n')
    (bin_dir / "qm").chmod(0o755)
    key = tmp / "id.pub"
    key.write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEBGQQsHsncFUMJ0rBZZ8fr2gCMIvUEON6VThYNKMpv8 op@here\n")
    log = tmp / "qm.log"
    log.unlink(missing_ok=True)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "QM_LOG": str(log)}
    run = subprocess.run([str(SCRIPT), *args, "--ssh-key", str(key)], env=env, capture_output=True, text=True,
                         timeout=30)
    return run, log.read_text().splitlines() if log.exists() else []


def test_the_vm_gets_cpu_type_host_and_the_vmid_of_its_address(tmp_path: Path) -> None:
    run, qm = _run(tmp_path, "gpu12", "10.20.0.112", "--template", "9000", "--cores", "16", "--memory", "65536")
    assert run.returncode == 0, run.stderr
    key = tmp_path / "id.pub"
    assert qm == [
        "status 112",
        "clone 9000 112 --name gpu12 --full 1 --storage local-lvm",
        "set 112 --cpu host --cores 16 --memory 65536 --net0 virtio,bridge=vmbr0"
        f" --ipconfig0 ip=10.20.0.112/24,gw=10.20.0.1 --nameserver 10.20.0.1 --ciuser root --sshkeys {key} --onboot 1",
        "resize 112 scsi0 200G",
        "start 112",
    ]


def test_a_prefix_on_the_address_and_an_explicit_vmid(tmp_path: Path) -> None:
    run, qm = _run(tmp_path, "gpu07", "10.20.0.7/23", "--template", "9000", "--vmid", "507", "--gateway", "10.20.1.254")
    assert run.returncode == 0, run.stderr
    assert "--ipconfig0 ip=10.20.0.7/23,gw=10.20.1.254" in qm[2] and qm[-1] == "start 507"


def test_refusals_come_before_any_vm_is_made(tmp_path: Path) -> None:
    cases = [
        (("gpu07", "10.20.0.7", "--template", "9000"), "the VMID would be 7"),  # Proxmox starts at 100
        (("GPU_1", "10.20.0.150", "--template", "9000"), "is not a hostname"),
        (("gpu1", "10.20.0.300", "--template", "9000"), "is not an IPv4 address"),
        (("gpu1", "10.20.0.150"), "--template is required"),
        (("gpu1", "10.20.0.150", "--template", "9000", "--bogus", "1"), "unknown option --bogus"),
    ]
    for args, said in cases:
        run, qm = _run(tmp_path, *args)
        assert run.returncode == 2 and said in run.stderr, (args, run.stderr)
        assert qm == [], args
    run, qm = _run(tmp_path, "gpu1", "10.20.0.150", "--template", "9000", vm_exists=True)
    assert run.returncode == 2 and "VMID 150 exists already" in run.stderr
    assert qm == ["status 150"]
