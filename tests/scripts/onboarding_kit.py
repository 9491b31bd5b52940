"""What the onboarding script tests share: a script's environment, a booted test machine (tests/scripts/machine.py),
a root shell inside it, and an `ssh` stand-in that can misbehave on cue."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from llmgw.pki.ca import init_ca, issue
from tests.scripts.machine import PATH, SSHD, Machine
from tests.tools import unavailable

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
QM = '#!/bin/sh\necho "$*" >> "$QM_LOG"\n[ "$1" != status ] || exit 2\n'  # Proxmox's qm: records; no VM exists


def need_machine() -> None:
    missing = [t for t in ("ip", "ssh", "ssh-keygen", "unshare", "nsenter") if shutil.which(t) is None]
    if not os.path.exists(SSHD):
        missing.append(f"{SSHD} (apt-get install openssh-server)")
    why = f"onboarding tests need root and {', '.join(missing)}" if missing else "onboarding tests need root"
    if os.geteuid() == 0 and not missing:
        return
    unavailable(why)


def script_env(tmp: Path, **extra: str) -> dict[str, str]:
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "qm").write_text(QM)
    (bin_dir / "qm").chmod(0o755)
    path = f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}"
    return {**os.environ, "PATH": path, "QM_LOG": str(tmp / "qm.log"), **extra}


def node_python() -> str:
    return os.path.realpath(sys.executable)  # the interpreter the bundle's wheels were built for, by its own path


def started(tmp: Path, machines: list[Machine], name: str, host: int) -> Machine:
    """A machine booting at <a subnet of its own>.host (no sshd yet), ended with the test by the `machines` fixture."""
    need_machine()
    m = Machine(tmp / "machine", name=name, number=host)
    machines.append(m)
    m.boot()
    return m


def booted(tmp: Path, machines: list[Machine], name: str, host: int) -> Machine:
    """A machine with sshd up, and a CA in tmp/pki to onboard it from."""
    m = started(tmp, machines, name, host)
    m.start_sshd()
    init_ca(tmp / "pki")
    return m


REAL_SSH = shutil.which("ssh") or "/usr/bin/ssh"


def inside(m: Machine, command: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """A root shell on the machine (its own /etc, /opt, /var, hostname, network)."""
    assert m.init is not None
    return subprocess.run(
        ["nsenter", "-t", str(m.init.pid), "-m", "-u", "-n", "env", "-i", f"PATH={PATH}", "bash", "-c", command],
        capture_output=True, text=True, timeout=timeout,
    )


def unpack_bundle(bundle_path: Path, into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(bundle_path) as t:
        t.extractall(into, filter="tar")
    return next(p for p in into.iterdir() if p.is_dir())


def node_pki(dir: Path, node: str, ip: str) -> Path:
    init_ca(dir)
    issue(dir, node, ips=[ip])
    return dir


def ssh_wrapper(tmp: Path, cases: str) -> None:
    """An `ssh` first on PATH that does what `cases` (bash `case` arms on the remote command, $last) says, and
    otherwise is the real ssh. Every remote command is logged to $SSH_LOG."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "ssh").write_text(
        "#!/bin/bash\n"
        'last="${@: -1}"\n'
        'printf "%s\\n" "$last" >> "$SSH_LOG"\n'
        f'case "$last" in\n{cases}\nesac\n'
        f'exec {REAL_SSH} "$@"\n'
    )
    (bin_dir / "ssh").chmod(0o755)


def onboard_argv(tmp: Path, m: Machine, node: str, bundle_path: Path, *extra: str, **env: str) -> list[str]:
    return [str(SCRIPTS / "onboard-node.sh"), node, m.address, "--control-plane", f"https://{m.gateway}:7443",
            "--ca", str(tmp / "pki"), "--bundle", str(bundle_path), "--identity", str(m.client_key),
            "--known-hosts", str(tmp / "known_hosts"), "--python", node_python(), "--wait-ssh", "20", *extra]

