"""Onboarding from nothing: the release bundle installed on a machine with no package index, through its own sshd,
the agent started and the node registered with a real control plane (tests/scripts/machine.py)."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from llmgw.dev.cluster import Cluster, admin_get, admin_up
from llmgw.pki.tls import serial_text
from tests.harness import plan, wait_until
from tests.integration.conftest import dump_logs
from tests.scripts.machine import Machine
from tests.scripts.onboarding_kit import SCRIPTS, booted, node_python, script_env, started

# its tests share a module fixture that starts processes: one worker runs them all (make test: --dist loadgroup)
pytestmark = pytest.mark.xdist_group("onboarding")


class Script:
    """A script run with its output read line by line as it comes, to act when it says something."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.started = time.monotonic()
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def count(self, text: str) -> int:
        return sum(text in line for line in list(self.lines))

    def wait_for(self, text: str, at_least: int = 1, timeout: float = 60) -> None:
        wait_until(lambda: self.count(text) >= at_least or self.proc.poll() is not None, timeout, repr(text))
        assert self.count(text) >= at_least, f"the script ended without saying {text!r}:\n{self.output}"

    def finish(self, timeout: float) -> int:
        rc = self.proc.wait(timeout)
        self._reader.join(10)
        return rc

    @property
    def output(self) -> str:
        return "\n".join(self.lines)


def test_add_node_from_nothing_installs_the_bundle_and_registers_within_a_minute(
    tmp_path: Path, bundle: Path, machines: list[Machine]
) -> None:
    m = started(tmp_path, machines, "node105", 105)  # the VM exists and is booting: no sshd yet
    p = plan(tmp_path / "cp", [], [], control_address=m.gateway, heartbeat_interval="1s")
    c = Cluster(p)
    c.start()
    try:
        wait_until(lambda: admin_up(p), 30, "control plane up")
        known_hosts = tmp_path / "known_hosts"
        s = Script(
            [str(SCRIPTS / "add-node.sh"), "node105", f"{m.address}/24", "--template", "9000",
             "--ssh-key", str(m.client_key) + ".pub", "--control-plane", f"https://{m.gateway}:{p.agent_port}",
             "--ca", str(p.workdir / "pki"), "--bundle", str(bundle), "--admin", p.admin,
             "--identity", str(m.client_key), "--known-hosts", str(known_hosts), "--python", node_python(),
             "--set", "heartbeat_interval=1s", "--wait-ssh", "60", "--wait-node", "60"],
            script_env(tmp_path, LLMGW_ADMIN_TOKEN_FILE=str(p.token_file)),
        )
        s.wait_for(f"waiting for ssh on {m.address}:22 (")  # refused: the machine has no sshd yet
        m.start_sshd()
        s.wait_for("copying")
        m.stop_sshd()  # cloud-init regenerating host keys restarts sshd in a new machine's first minute
        s.wait_for(f"waiting for ssh on {m.address}:22", at_least=s.count(f"waiting for ssh on {m.address}:22") + 1)
        m.start_sshd()
        rc = s.finish(120)
        took = time.monotonic() - s.started
        assert rc == 0, f"{s.output}\n{dump_logs(p)}\n{m.upper('/var/lib/standin/llmgw-agent.log').read_text()}"
        assert took < 60, f"registered in {took:.1f} s from the script's start (the aim is under 60 s)"
        assert "node105 registered" in s.output
        print(s.output)

        serial = serial_text(x509.load_pem_x509_certificate((p.workdir / "pki/node105.crt").read_bytes()))
        row = next(r for r in admin_get(p, "/api/nodes") if r["node"] == "node105")
        assert (row["state"], row["address"], row["cert_serial"]) == ("live", m.address, serial)

        # installed from the bundle, whole: the environment is a release directory marked complete, and the
        # machine had no way to reach a package index (no route beyond its own link)
        venv = m.upper("/opt/llmgw/.venv")
        assert venv.is_symlink() and os.readlink(venv).startswith("releases/llmgw-0.1.0-")
        assert (venv / ".complete").exists()
        routes = subprocess.run(["ip", "-n", m.netns, "route"], capture_output=True, text=True).stdout
        assert "default" not in routes and routes.strip(), routes
        assert not m.upper("/opt/llmgw/incoming").exists()  # the copy of the node's key went with the rest
        agent_yaml = yaml.safe_load(m.upper("/etc/llmgw/agent.yaml").read_text())
        assert agent_yaml == {
            "control_planes": [f"https://{m.gateway}:{p.agent_port}"],
            "tls": {"ca": "/etc/llmgw/tls/ca.crt", "cert": "/etc/llmgw/tls/node.crt", "key": "/etc/llmgw/tls/node.key"},
            "heartbeat_interval": "1s",
        }
        assert m.upper("/etc/llmgw/tls").is_symlink()  # certificate and key change together, by one rename
        assert m.upper("/etc/llmgw/tls/node.key").stat().st_mode & 0o077 == 0
        assert not (p.workdir / "pki/node105.key").exists()  # the node holds its key; the CA keeps no copy
        assert "start llmgw-agent" in m.upper("/var/lib/standin/systemctl.log").read_text()
        learned = subprocess.run(["ssh-keygen", "-F", m.address, "-f", str(known_hosts)], capture_output=True)
        assert learned.returncode == 0  # its host key, learned on first sight (accept-new)

        qm = (tmp_path / "qm.log").read_text().splitlines()
        assert qm[0] == "status 105"
        assert qm[1] == "clone 9000 105 --name node105 --full 1 --storage local-lvm"
        assert qm[2].startswith("set 105 --cpu host ") and f"--ipconfig0 ip={m.address}/24,gw={m.gateway}" in qm[2]
        assert qm[-1] == "start 105"

        # onboarded again (a renewed certificate, the same release): reused, the running agent handed over to it
        # alone, and the certificate it spoke with before revoked once the new one is in use
        first_agent = int(m.upper("/var/lib/standin/llmgw-agent.pid").read_text())
        again = subprocess.run(
            [str(SCRIPTS / "onboard-node.sh"), "node105", m.address, "--control-plane",
             f"https://{m.gateway}:{p.agent_port}", "--ca", str(p.workdir / "pki"), "--bundle", str(bundle),
             "--admin", p.admin, "--identity", str(m.client_key), "--known-hosts", str(known_hosts),
             "--python", node_python(), "--set", "heartbeat_interval=1s", "--wait-node", "60"],
            env=script_env(tmp_path, LLMGW_ADMIN_TOKEN_FILE=str(p.token_file)), capture_output=True, text=True,
            timeout=120,
        )
        said = again.stdout + again.stderr
        assert again.returncode == 0, said
        assert "is already installed" in said and "handed the running agent over" in said, said
        assert f"the certificate node105 used before ({serial}) is revoked" in said, said
        assert "kill --kill-who=main -s SIGUSR2 llmgw-agent" in m.upper("/var/lib/standin/systemctl.log").read_text()
        assert int(m.upper("/var/lib/standin/llmgw-agent.pid").read_text()) != first_agent
        renewed = serial_text(x509.load_pem_x509_certificate((p.workdir / "pki/node105.crt").read_bytes()))
        row = next(r for r in admin_get(p, "/api/nodes") if r["node"] == "node105")
        assert (row["state"], row["cert_serial"]) == ("live", renewed) and renewed != serial
    finally:
        c.stop()


def onboard(tmp: Path, m: Machine, node: str, bundle: Path, known_hosts: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPTS / "onboard-node.sh"), node, m.address, "--control-plane", f"https://{m.gateway}:7443",
         "--ca", str(tmp / "pki"), "--bundle", str(bundle), "--identity", str(m.client_key),
         "--known-hosts", str(known_hosts), "--python", node_python(), "--wait-ssh", "30"],
        env=script_env(tmp), capture_output=True, text=True, timeout=120,
    )


def test_a_changed_host_key_is_refused_and_nothing_is_copied(
    tmp_path: Path, bundle: Path, machines: list[Machine]
) -> None:
    m = booted(tmp_path, machines, "node106", 106)
    known_hosts = tmp_path / "known_hosts"
    assert m.ssh("true", known_hosts).returncode == 0  # seen once: its key is known
    m.stop_sshd()
    m.new_host_key()  # another machine at the address, or this one rebuilt
    m.start_sshd()
    run = onboard(tmp_path, m, "node106", bundle, known_hosts)
    assert run.returncode == 5, run.stdout + run.stderr
    assert "did not present the host key" in run.stderr
    assert f"ssh-keygen -f {known_hosts} -R {m.address}" in run.stderr
    assert not m.upper("/opt/llmgw").exists()


def test_a_machine_whose_hostname_is_not_the_node_id_is_sent_nothing(
    tmp_path: Path, bundle: Path, machines: list[Machine]
) -> None:
    m = booted(tmp_path, machines, "debian", 107)
    run = onboard(tmp_path, m, "node107", bundle, tmp_path / "known_hosts")
    assert run.returncode == 3, run.stdout + run.stderr
    assert "calls itself 'debian', not 'node107': nothing was sent to it" in run.stderr
    assert not m.upper("/opt/llmgw").exists() and not m.upper("/etc/llmgw").exists()
