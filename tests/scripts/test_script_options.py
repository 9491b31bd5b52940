"""Every option of the onboarding scripts is checked before it reaches ssh or Proxmox's qm: a value that would be
read as another option (`--ssh-user -oProxyCommand=...`), or that would add properties to a Proxmox option
(`--bridge vmbr0,firewall=0`), is wrong use (exit 2) with nothing issued and nothing run. And an onboarding that
fails takes back the certificate and key it issued: the CA directory is as it was."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from llmgw.pki.ca import init_ca, issue
from tests.harness import free_port
from tests.scripts.test_provision import _run as provision

ROOT = Path(__file__).resolve().parents[2]
ONBOARD = ROOT / "scripts" / "onboard-node.sh"


def _env(tmp: Path) -> dict[str, str]:
    """This interpreter's llmgw first on PATH (the one these sources make, installed or not)."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "llmgw").write_text(f'#!/bin/sh\nexec {sys.executable} -m llmgw.cli.main "$@"\n')
    (bin_dir / "llmgw").chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}"}


def _setup(tmp: Path) -> tuple[Path, Path]:
    """A CA and a (dummy) bundle with its sha256 beside it."""
    init_ca(tmp / "pki")
    dummy = tmp / "llmgw-0-cp311-x86_64.tar.gz"
    dummy.write_bytes(b"x")
    subprocess.run(f"sha256sum {dummy.name} > {dummy.name}.sha256", shell=True, cwd=tmp, check=True)
    return tmp / "pki", dummy


def _onboard(tmp: Path, *extra: str, node: str = "gpu12", address: str = "127.0.0.1",
             ) -> subprocess.CompletedProcess[str]:
    pki, dummy = tmp / "pki", tmp / "llmgw-0-cp311-x86_64.tar.gz"
    key = tmp / "id"
    key.write_text("not a key\n")
    argv = [str(ONBOARD), node, address, "--control-plane", "https://cp:7443", "--ca", str(pki),
            "--bundle", str(dummy), "--known-hosts", str(tmp / "known_hosts"), "--identity", str(key),
            "--ssh-port", str(free_port()), "--wait-ssh", "1", "--admin", "http://127.0.0.1:1", *extra]
    return subprocess.run(argv, env=_env(tmp), capture_output=True, text=True, timeout=60, cwd=tmp)


def test_an_ssh_user_that_is_an_ssh_option_runs_nothing(tmp_path: Path) -> None:
    """The finding: `--ssh-user '-oProxyCommand=...'` became `ssh ... -oProxyCommand=...@ADDRESS`, and ssh ran
    the command on the operator's machine."""
    _setup(tmp_path)
    marker = tmp_path / "pwned"
    run = _onboard(tmp_path, "--ssh-user", f"-oProxyCommand=touch {marker}")
    assert not list(tmp_path.glob("pwned*")), "ssh ran the ProxyCommand given as a user name"
    assert run.returncode == 2 and "--ssh-user" in run.stderr, run.stdout + run.stderr
    assert not (tmp_path / "pki" / "gpu12.key").exists()


@pytest.mark.parametrize(("option", "value"), [
    ("--ssh-user", "root@10.0.0.9"),
    ("--ssh-user", "a b"),
    ("--ssh-user", "-l"),
    ("--ssh-port", "22 -oProxyCommand=x"),
    ("--ssh-port", "0"),
    ("--ssh-port", "70000"),
    ("--identity", "-oProxyCommand=x"),
    ("--identity", "/no/such/key"),
    ("--known-hosts", "/tmp/kh -oProxyCommand=x"),
    ("--control-plane", "https://cp:7443 --set x=y"),
    ("--control-plane", "https://cp:7443/'$(id)'"),
    ("--admin", "file:///etc/passwd"),
    ("--python", "-c"),
    ("--python", "python3 -c 'import os'"),
    ("--set", "heartbeat_interval=1s\nnode_id: other"),
    ("--set", "Bad-Key=1"),
    ("--wait-ssh", "-1"),
])
def test_a_value_that_is_no_value_of_its_option_is_wrong_use(tmp_path: Path, option: str, value: str) -> None:
    _setup(tmp_path)
    run = _onboard(tmp_path, option, value)
    assert run.returncode == 2 and option in run.stderr, (option, value, run.stdout + run.stderr)
    assert sorted(p.name for p in (tmp_path / "pki").iterdir()) == ["ca.crt", "ca.key"], "issued before checking"


def test_a_failed_onboarding_takes_back_the_key_and_certificate_it_issued(tmp_path: Path) -> None:
    """ssh never answers (nothing listens on the port): the onboarding fails after issuing, and the node's key
    must not stay in the CA directory."""
    _setup(tmp_path)
    run = _onboard(tmp_path)
    assert run.returncode == 5, run.stdout + run.stderr
    assert sorted(p.name for p in (tmp_path / "pki").iterdir()) == ["ca.crt", "ca.key"], run.stderr


def test_a_failed_onboarding_again_keeps_the_certificate_from_before(tmp_path: Path) -> None:
    pki, _ = _setup(tmp_path)
    issue(pki, "gpu12", ips=["127.0.0.1"])
    (pki / "gpu12.key").unlink()  # the node holds its key; the CA keeps the certificate
    before = (pki / "gpu12.crt").read_bytes()
    run = _onboard(tmp_path)
    assert run.returncode == 5, run.stdout + run.stderr
    assert (pki / "gpu12.crt").read_bytes() == before and not (pki / "gpu12.key").exists()


@pytest.mark.parametrize(("option", "value"), [
    ("--bridge", "vmbr0,firewall=0"),
    ("--bridge", "vmbr0 --delete net1"),
    ("--gateway", "10.20.0.1,ip6=auto"),
    ("--gateway", "10.20.0.999"),
    ("--nameserver", "10.20.0.1 --delete net0"),
    ("--storage", "local-lvm,size=1"),
    ("--storage", "--full"),
    ("--disk", "200G --delete"),
    ("--disk", "+200G"),
    ("--cores", "8 --x"),
    ("--memory", "lots"),
    ("--template", "9000,x"),
    ("--vmid", "150 --x"),
])
def test_a_proxmox_option_with_more_in_it_is_refused_before_qm(tmp_path: Path, option: str, value: str) -> None:
    run, qm = provision(tmp_path, "gpu1", "10.20.0.150", "--template", "9000", option, value)
    assert run.returncode == 2 and option in run.stderr, (option, value, run.stderr)
    assert qm == [], (option, value)


def test_an_ssh_key_file_named_like_an_option_is_refused(tmp_path: Path) -> None:
    (tmp_path / "-x.pub").write_text("ssh-ed25519 AAAA op@here\n")  # there, so only its name can refuse it
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "qm").write_text('#!/bin/sh\necho "$*" >> "$QM_LOG"\n[ "$1" != status ] || exit 2\n')
    (bin_dir / "qm").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "QM_LOG": str(tmp_path / "qm.log")}
    run = subprocess.run([str(ROOT / "scripts" / "provision-node.sh"), "gpu1", "10.20.0.150", "--template", "9000",
                          "--ssh-key", "-x.pub"], env=env, capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert run.returncode == 2 and "--ssh-key" in run.stderr, run.stderr
    assert not (tmp_path / "qm.log").exists()
