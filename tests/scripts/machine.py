"""A machine for onboarding tests: a network namespace on a veth pair with its own address and no route anywhere
else, its own hostname, its own /etc, /opt, /var, /run and /usr/local (overlays whose changes land in a directory
of the test's), its own sshd with fresh host keys, and a stand-in for systemd's `systemctl` (this machine's PID 1
is no systemd) that runs the agent's unit the way the unit says and records what it was asked. Root only."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.addresses import Subnet, subnet

from tests.harness import wait_until
from tests.netns import Lan

SSHD = "/usr/sbin/sshd"
OVERLAID = {"etc": "/etc", "opt": "/opt", "var": "/var", "run": "/run", "usrlocal": "/usr/local"}
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # what a fresh Debian root login gets

SYSTEMCTL = r"""#!/bin/bash
# systemctl's stand-in on a test machine: records its arguments; runs a unit's ExecStart as systemd would
# (detached; started again after a SIGUSR2 hand-over, as Restart=always does)
d=/var/lib/standin
mkdir -p "$d"
echo "$*" >> "$d/systemctl.log"
args=()
for a in "$@"; do case "$a" in --*) ;; *) args+=("$a") ;; esac; done
verb="${args[0]}"
name="${args[-1]%.service}"
unit="/etc/systemd/system/$name.service"
pidf="$d/$name.pid"
log="$d/$name.log"
alive() { [ -f "$pidf" ] && kill -0 "$(cat "$pidf")" 2>/dev/null; }
start() {
    [ -f "$unit" ] || { echo "Unit $name.service not found." >&2; return 5; }
    for s in $(sed -n 's/^StateDirectory=//p' "$unit"); do mkdir -p "/var/lib/$s"; done
    cmd=$(sed -n 's/^ExecStart=//p' "$unit")
    (umask 077; setsid $cmd >> "$log" 2>&1 < /dev/null & echo $! > "$pidf")
}
stop_it() { alive && kill "$(cat "$pidf")"; for _ in $(seq 100); do alive || return 0; sleep 0.1; done; }
case "$verb" in
    daemon-reload) exit 0 ;;
    enable) if [ "$1" = --now ] || [ "$2" = --now ]; then alive || start; fi ;;
    is-active) alive ;;
    start) alive || start ;;
    restart) stop_it; start ;;
    stop) stop_it ;;
    kill) sig=TERM
          for a in "$@"; do case "$a" in SIG*) sig="$a" ;; esac; done
          kill -s "${sig#SIG}" "$(cat "$pidf")"; for _ in $(seq 100); do alive || break; sleep 0.1; done; start ;;
    status) if alive; then echo "active (running), pid $(cat "$pidf")"; else echo "inactive (dead)"; fi
            tail -n 30 "$log" 2>/dev/null; alive ;;
    *) echo "systemctl stand-in: $* not understood" >&2; exit 1 ;;
esac
"""


@dataclass
class Machine:
    dir: Path
    name: str  # its hostname
    number: int = 10  # its address on its own subnet: <subnet>.number
    net: Subnet = field(default_factory=subnet)
    tag: str = field(default_factory=lambda: secrets.token_hex(3))
    lan: Lan | None = None
    init: subprocess.Popen[bytes] | None = None
    sshd: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return self.net.at(self.number)

    @property
    def gateway(self) -> str:
        """This host's side of the machine's link: where the control plane listens for it."""
        return self.net.gateway

    @property
    def netns(self) -> str:
        return f"llmgw-m{self.tag}"

    @property
    def client_key(self) -> Path:
        return self.dir / "keys" / "client"

    def upper(self, path: str) -> Path:
        """Where a file this machine wrote under one of its own directories lies on this host."""
        for short, top in OVERLAID.items():
            if path == top or path.startswith(top + "/"):
                return self.dir / "up" / short / path[len(top):].lstrip("/")
        raise ValueError(f"{path} is not one of the machine's own directories")

    def boot(self) -> None:
        """Namespaces and overlays up, held by one long-lived process; sshd not started yet."""
        keys = self.dir / "keys"
        keys.mkdir(parents=True)
        self.new_host_key()
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.client_key)], check=True)
        (keys / "authorized_keys").write_text((keys / "client.pub").read_text())
        for short in OVERLAID:
            (self.dir / "up" / short).mkdir(parents=True)
            (self.dir / "work" / short).mkdir(parents=True)
        standin = self.dir / "up" / "usrlocal" / "sbin" / "systemctl"
        standin.parent.mkdir(parents=True)
        standin.write_text(SYSTEMCTL)
        standin.chmod(0o755)
        (self.dir / "sshd_config").write_text(
            f"ListenAddress {self.address}\nPort 22\nHostKey {keys / 'host'}\n"
            f"AuthorizedKeysFile {keys / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
            "PidFile none\nLogLevel VERBOSE\n"
        )
        self.lan = Lan(self.net).open()
        self.lan.add(self.number, netns=self.netns)
        mounts = " && ".join(
            f"mount -t overlay overlay -o lowerdir={top},upperdir={self.dir}/up/{short},workdir={self.dir}/work/{short}"
            f" {top}" for short, top in OVERLAID.items()
        )
        script = f"{mounts} && hostname {self.name} && mkdir -p /run/sshd && echo up && exec sleep infinity"
        self.init = subprocess.Popen(
            ["ip", "netns", "exec", self.netns, "unshare", "--mount", "--uts", "--propagation", "private",
             "sh", "-c", script],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        )
        assert self.init.stdout is not None
        first = self.init.stdout.readline().decode().strip()
        assert first == "up", f"the machine did not come up: {first} {self.init.stdout.read(2000)!r}"

    def new_host_key(self) -> None:
        key = self.dir / "keys" / "host"
        for p in (key, key.with_suffix(".pub")):
            p.unlink(missing_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)

    def start_sshd(self) -> None:
        assert self.init is not None
        path = self.dir / "sshd.log"
        since = path.stat().st_size if path.exists() else 0
        with path.open("ab") as log:
            self.sshd = subprocess.Popen(
                ["nsenter", "-t", str(self.init.pid), "-m", "-u", "-n", "env", "-i", f"PATH={PATH}",
                 SSHD, "-D", "-e", "-f", str(self.dir / "sshd_config")],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        sshd = self.sshd
        wait_until(lambda: b"Server listening" in path.read_bytes()[since:] or sshd.poll() is not None, 10,
                   "sshd listening")
        assert sshd.poll() is None, f"sshd exited: {path.read_text()[-2000:]}"

    def stop_sshd(self) -> None:
        """The listener only, as `systemctl restart ssh` does: sessions already open carry on."""
        if self.sshd is not None and self.sshd.poll() is None:
            self.sshd.terminate()
            self.sshd.wait(10)
        self.sshd = None

    def ssh(self, command: str, known_hosts: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ssh", "-i", str(self.client_key), "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={known_hosts}",
             "-o", "StrictHostKeyChecking=accept-new", f"root@{self.address}", command],
            capture_output=True, text=True, timeout=30,
        )

    def pids(self) -> list[int]:
        out = subprocess.run(["ip", "netns", "pids", self.netns], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]

    def close(self) -> None:
        """Every process in the machine's namespace was started by the test (init, sshd, sessions, the agent and
        what it ran): end them, then the namespace and its link."""
        self.stop_sshd()
        for _ in range(3):
            for pid in self.pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if not self.pids():
                break
            time.sleep(0.1)
        if self.init is not None:
            self.init.wait(10)
        if self.lan is not None:
            self.lan.close()
