"""onboard-node.sh when the connection, the copy, the machine or the operator's input goes wrong: a documented exit
status, the node key only ever on the node, and nothing the machine prints driving the operator's terminal."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from llmgw.pki.ca import init_ca
from tests.scripts.machine import Machine
from tests.scripts.onboarding_kit import (
    REAL_SSH,
    SCRIPTS,
    booted,
    inside,
    onboard_argv,
    script_env,
    ssh_wrapper,
    started,
)

# its tests share a module fixture that starts processes: one worker runs them all (make test: --dist loadgroup)
pytestmark = pytest.mark.xdist_group("onboard_node_failures")

DOCUMENTED_ONBOARD_CODES = {0, 2, 3, 4, 5}


def test_an_install_cut_off_after_it_finished_is_not_rerun_into_a_bogus_failure(
    tmp_path: Path, bundle: Path, machines: list[Machine]
) -> None:
    """A connection dropped after the remote install ran is not retried into a failure (the step is not idempotent)."""
    m = booted(tmp_path, machines, "node133", 133)
    flag = tmp_path / "dropped"
    ssh_wrapper(tmp_path, f"""  *install-node.sh*)
    if [ ! -e {flag} ]; then touch {flag}; {REAL_SSH} "$@"; echo "Connection to node closed." >&2; exit 255; fi ;;""")
    run = subprocess.run(
        onboard_argv(tmp_path, m, "node133", bundle, "--wait-node", "2", "--admin", "http://127.0.0.1:9"),
        env=script_env(tmp_path, SSH_LOG=str(tmp_path / "ssh.log"), LLMGW_ADMIN_TOKEN="x"),
        capture_output=True, text=True, timeout=240,
    )
    out = run.stdout + run.stderr
    assert m.upper("/opt/llmgw/.venv").is_symlink(), f"the first install did not complete: {out}"
    assert run.returncode in DOCUMENTED_ONBOARD_CODES, f"exit {run.returncode}:\n{out}"
    assert "the install on node133 failed" not in out, out


def test_a_copy_that_fails_its_check_leaves_no_node_key_on_the_machine(
    tmp_path: Path, bundle: Path, machines: list[Machine]
) -> None:
    """A bundle that fails its sha256 check on the machine leaves no node key there."""
    m = booted(tmp_path, machines, "node134", 134)
    ssh_wrapper(tmp_path, f"""  *"sha256sum --quiet -c"*)
    {REAL_SSH} "${{@:1:$#-1}}" "printf x >> /opt/llmgw/incoming/{bundle.name}" ;;""")
    run = subprocess.run(onboard_argv(tmp_path, m, "node134", bundle),
                         env=script_env(tmp_path, SSH_LOG=str(tmp_path / "ssh.log")), capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 4 and "does not match" in run.stderr, run.stdout + run.stderr
    assert not m.upper("/opt/llmgw/incoming/pki/node.key").exists(), "the node's private key was left behind"


def test_what_the_machine_prints_cannot_drive_the_operators_terminal(
    tmp_path: Path, bundle: Path, machines: list[Machine]
) -> None:
    """The machine's words (here a hostname carrying an OSC sequence) reach the operator's terminal without escapes."""
    m = started(tmp_path, machines, "node135", 135)
    assert m.init is not None
    subprocess.run(["nsenter", "-t", str(m.init.pid), "-u", sys.executable, "-c",
                    "import socket; socket.sethostname('evil\\x1b]0;owned\\x07\\x1b[2J')"], check=True)
    m.start_sshd()
    init_ca(tmp_path / "pki")
    run = subprocess.run(onboard_argv(tmp_path, m, "node135", bundle), env=script_env(tmp_path), capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 3, run.stdout + run.stderr  # the hostname is not the node's
    assert "\x1b" not in run.stdout + run.stderr, repr((run.stdout + run.stderr)[-600:])


def test_onboarding_leaves_its_standard_input_to_the_caller(
    tmp_path: Path, bundle: Path, machines: list[Machine]
) -> None:
    """ssh reads nothing of onboarding's stdin, so `while read name addr; ... done < nodes` onboards every line."""
    m = booted(tmp_path, machines, "debian", 136)
    argv = " ".join(shlex.quote(a) for a in onboard_argv(tmp_path, m, "node136", bundle))
    run = subprocess.run(["bash", "-c", f"{argv}; echo rc=$?; cat"], input=f"node137 {m.net.at(137)}\n",
                         env=script_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert "rc=3" in run.stdout, run.stdout + run.stderr
    assert f"node137 {m.net.at(137)}" in run.stdout, "onboarding swallowed the caller's stdin (the next node's line)"


def test_the_node_key_is_not_sent_to_a_machine_that_is_not_the_node(
    tmp_path: Path, bundle: Path, machines: list[Machine]
) -> None:
    """The machine's hostname is compared with NAME before anything is copied: the node key goes only to the node."""
    m = booted(tmp_path, machines, "debian", 137)
    log = tmp_path / "ssh.log"
    ssh_wrapper(tmp_path, "  *) ;;")
    run = subprocess.run(onboard_argv(tmp_path, m, "node137", bundle), env=script_env(tmp_path, SSH_LOG=str(log)),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode in (3, 5), run.stdout + run.stderr
    copies = [c for c in log.read_text().splitlines() if "tar -xf -" in c]
    assert not copies, f"the key went to a machine calling itself 'debian', not node137: {copies}"


def test_the_ssh_keygen_command_offered_for_a_changed_key_works_with_ssh_port(
    tmp_path: Path, machines: list[Machine]
) -> None:
    """With --ssh-port, the ssh-keygen command offered for a changed host key removes ssh's `[ADDRESS]:PORT` entry."""
    m = started(tmp_path, machines, "node138", 138)
    cfg = m.dir / "sshd_config"
    cfg.write_text(cfg.read_text().replace("Port 22\n", "Port 2222\n"))
    m.start_sshd()
    kh = tmp_path / "known_hosts"
    first = subprocess.run([REAL_SSH, "-p", "2222", "-i", str(m.client_key), "-o", "BatchMode=yes",
                            "-o", f"UserKnownHostsFile={kh}", "-o", "StrictHostKeyChecking=accept-new",
                            f"root@{m.address}", "true"], capture_output=True, text=True, timeout=30)
    assert first.returncode == 0, first.stderr
    m.stop_sshd()
    m.new_host_key()
    m.start_sshd()
    init_ca(tmp_path / "pki")
    dummy = tmp_path / "llmgw-0-cp311-x86_64.tar.gz"
    dummy.write_bytes(b"x")
    subprocess.run(f"sha256sum {dummy.name} > {dummy.name}.sha256", shell=True, cwd=tmp_path, check=True)
    run = subprocess.run(
        [str(SCRIPTS / "onboard-node.sh"), "node138", m.address, "--control-plane", f"https://{m.gateway}:7443",
         "--ca", str(tmp_path / "pki"), "--bundle", str(dummy), "--identity", str(m.client_key),
         "--known-hosts", str(kh), "--ssh-port", "2222", "--wait-ssh", "20"],
        env=script_env(tmp_path), capture_output=True, text=True, timeout=60,
    )
    assert run.returncode == 5, run.stdout + run.stderr
    advice = re.search(r"(ssh-keygen -f \S+ -R \S+)", run.stderr)
    assert advice, run.stderr
    subprocess.run(shlex.split(advice.group(1).rstrip(",")), capture_output=True, check=True)
    left = subprocess.run(["ssh-keygen", "-F", f"[{m.address}]:2222", "-f", str(kh)], capture_output=True)
    assert left.returncode != 0, f"`{advice.group(1)}` left the changed key's entry in place"


def test_a_copy_failure_that_is_not_ssh_is_not_waited_out_as_ssh(
    tmp_path: Path, bundle: Path, machines: list[Machine]
) -> None:
    """A copy failing for a reason other than ssh (/opt/llmgw a file) ends at once (4), not waited out as ssh."""
    m = started(tmp_path, machines, "node139", 139)
    assert inside(m, "echo not-a-directory > /opt/llmgw").returncode == 0
    m.start_sshd()
    init_ca(tmp_path / "pki")
    argv = onboard_argv(tmp_path, m, "node139", bundle)
    argv[argv.index("--wait-ssh") + 1] = "3"
    run = subprocess.run(argv, env=script_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert run.returncode == 4, run.stdout + run.stderr
    assert "to copy again" not in run.stdout, run.stdout


def test_an_address_that_is_not_an_ip_is_wrong_use(tmp_path: Path) -> None:
    """An ADDRESS that is not an IP address is wrong use (2), not a failed certificate step (4)."""
    init_ca(tmp_path / "pki")
    dummy = tmp_path / "llmgw-0-cp311-x86_64.tar.gz"
    dummy.write_bytes(b"x")
    subprocess.run(f"sha256sum {dummy.name} > {dummy.name}.sha256", shell=True, cwd=tmp_path, check=True)
    run = subprocess.run(
        [str(SCRIPTS / "onboard-node.sh"), "gpu12", "gpu12.lan", "--control-plane", "https://cp:7443",
         "--ca", str(tmp_path / "pki"), "--bundle", str(dummy), "--known-hosts", str(tmp_path / "kh")],
        env=script_env(tmp_path), capture_output=True, text=True, timeout=60,
    )
    assert run.returncode == 2, f"exit {run.returncode}: {run.stderr}"

