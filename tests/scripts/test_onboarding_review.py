"""Attack review of adding a node in one command (scripts/*.sh, `llmgw ctl nodes wait`, the doc tests). Each test
shows one defect and fails while it is there. Machine tests use tests/scripts/machine.py (root, sshd, netns)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

import tests.docs.test_commands as doc_test
from llmgw.cli.main import app
from llmgw.pki.ca import init_ca, issue
from tests.scripts.machine import PATH, Machine
from tests.scripts.test_onboarding import (  # noqa: F401  (bundle and machines are fixtures)
    _env,
    _need_machine,
    _node_python,
    booted,
    bundle,
    machines,
)

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
DOCUMENTED_ONBOARD_CODES = {0, 2, 3, 4, 5}
REAL_SSH = shutil.which("ssh") or "/usr/bin/ssh"


def _inside(m: Machine, command: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """A root shell on the machine (its own /etc, /opt, /var, hostname, network)."""
    assert m.init is not None
    return subprocess.run(
        ["nsenter", "-t", str(m.init.pid), "-m", "-u", "-n", "env", "-i", f"PATH={PATH}", "bash", "-c", command],
        capture_output=True, text=True, timeout=timeout,
    )


def _unpack(bundle_path: Path, into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(bundle_path) as t:
        t.extractall(into, filter="tar")
    return next(p for p in into.iterdir() if p.is_dir())


def _pki(dir: Path, node: str, ip: str) -> Path:
    init_ca(dir)
    issue(dir, node, ips=[ip])
    return dir


def _ssh_wrapper(tmp: Path, cases: str) -> None:
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


def _onboard(tmp: Path, m: Machine, node: str, bundle_path: Path, *extra: str, **env: str) -> list[str]:
    return [str(SCRIPTS / "onboard-node.sh"), node, m.address, "--control-plane", f"https://{m.gateway}:7443",
            "--ca", str(tmp / "pki"), "--bundle", str(bundle_path), "--identity", str(m.client_key),
            "--known-hosts", str(tmp / "known_hosts"), "--python", _node_python(), "--wait-ssh", "20", *extra]


# ---------------------------------------------------------------------------------------------------------------
# install-node.sh


def test_the_upgrade_hand_over_signals_only_the_agent_not_its_engines() -> None:
    """Found by an attack review.
    install-node.sh hands a running agent over with `systemctl kill -s SIGUSR2 llmgw-agent`. systemctl(1): with
    `kill`, --kill-whom (--kill-who) "defaults to all": every process of the unit's control group gets the signal,
    and the engines the agent started are in that cgroup (KillMode=process keeps them there; start_new_session
    only makes a new process group). SIGUSR2's default action is to terminate: llama-server, vLLM and the sim
    engine die at every re-onboarding, the opposite of "its engines keep serving and are adopted". The test
    machine's systemctl stand-in signals only the main PID, so test_onboarding cannot see it."""
    lines = [ln for ln in (SCRIPTS / "install-node.sh").read_text().splitlines()
             if re.match(r"\s*[^#]*\bsystemctl kill\b", ln)]
    assert lines, "install-node.sh no longer hands over with systemctl kill"
    for ln in lines:
        assert re.search(r"--kill-whom[= ]main|--kill-who[= ]main", ln), ln.strip()


def test_set_node_id_other_than_the_node_is_refused_before_anything_is_installed(tmp_path: Path) -> None:
    """Found by an attack review.
    `--set node_id=X` skips the hostname check altogether, whatever X is: `install-node.sh --node gpu1 --set
    node_id=other` goes on to install, and the agent then reports as `other` with a certificate whose CN is gpu1,
    which the control plane refuses at every heartbeat (onboarding waits --wait-node seconds and exits 4). The
    override the docs give is node_id=NAME; any other value can only fail, and should be refused as wrong use.
    (install-release.sh is replaced by a stub that records it ran and exits 99.)"""
    if os.geteuid() != 0:
        pytest.skip("install-node.sh refuses to run without root")
    shutil.copy(SCRIPTS / "install-node.sh", tmp_path / "install-node.sh")
    (tmp_path / "install-release.sh").write_text(f'#!/bin/sh\ntouch {tmp_path}/installed\nexit 99\n')
    (tmp_path / "install-release.sh").chmod(0o755)
    run = subprocess.run(
        [str(tmp_path / "install-node.sh"), "--control-plane", "https://cp:7443", "--node", "gpu1",
         "--set", "node_id=other"],
        capture_output=True, text=True, timeout=30,
    )
    assert not (tmp_path / "installed").exists(), f"it went on to install (exit {run.returncode}): {run.stderr}"
    assert run.returncode in (2, 3), run.stderr


def test_a_fqdn_hostname_gets_an_agent_whose_id_is_the_certificate_cn(
    tmp_path: Path, bundle: Path, machines: list[Machine]  # noqa: F811
) -> None:
    """Found by an attack review.
    install-node.sh compares NAME with the hostname cut at its first dot (`${host%%.*}`), but the agent takes its
    id from socket.gethostname() whole (agent/identity.py). On a machine whose hostname is node131.lab the check
    passes, no node_id is written, the agent reports as 'node131.lab' with a certificate for 'node131', and every
    heartbeat is refused ("certificate is for node 'node131'; it may not write node 'node131.lab'"). Either the
    install must refuse (exit 3) or agent.yaml must pin node_id: NAME."""
    _need_machine()
    m = Machine(tmp_path / "machine", name="node131.lab", address="10.251.31.131", gateway="10.251.31.1")
    machines.append(m)
    m.boot()
    here = _unpack(bundle, tmp_path / "b")
    pki = _pki(tmp_path / "pki", "node131", m.address)
    run = _inside(m, f"{here}/install-node.sh --control-plane https://{m.gateway}:7443 --node node131 "
                     f"--pki {pki} --python {_node_python()}")
    if run.returncode == 3:
        return  # refused: fine
    assert run.returncode == 0, run.stdout + run.stderr
    said = _inside(m, "/opt/llmgw/.venv/bin/python -c 'import socket, yaml; "
                      "c = yaml.safe_load(open(\"/etc/llmgw/agent.yaml\")); "
                      "print(c.get(\"node_id\") or socket.gethostname())'")
    assert said.stdout.strip() == "node131", f"the agent will call itself {said.stdout.strip()!r}, its CN is node131"


@pytest.fixture(scope="module")
def installed(bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Machine, Path, Path]]:  # noqa: F811
    """A machine (node132) with the release installed and the agent started by install-node.sh, certificate A."""
    _need_machine()
    tmp = tmp_path_factory.mktemp("installed")
    m = Machine(tmp / "machine", name="node132", address="10.251.32.132", gateway="10.251.32.1")
    try:
        m.boot()
        here = _unpack(bundle, tmp / "b")
        pki = _pki(tmp / "pki", "node132", m.address)
        run = _inside(m, f"{here}/install-node.sh --control-plane https://{m.gateway}:7443 --node node132 "
                         f"--pki {pki} --python {_node_python()}")
        assert run.returncode == 0, run.stdout + run.stderr
        yield m, here, pki
    finally:
        m.close()


def test_a_malformed_set_is_wrong_use_exit_2_not_1(installed: tuple[Machine, Path, Path]) -> None:
    """Found by an attack review.
    install-node.sh documents 0/2/3/4; a --set without '=' (or with a value that is not YAML) makes the embedded
    Python `sys.exit(msg)` (or raise a yaml traceback), and set -e ends the script with status 1, after the
    release was installed and made current and the certificates replaced, leaving /etc/llmgw/agent.yaml.new
    behind. onboard-node.sh passes the 1 through (`die "$rc"`), also outside its documented statuses."""
    m, here, _ = installed
    for bad in ("novalue", "labels=[unclosed"):
        run = _inside(m, f"{here}/install-node.sh --control-plane https://{m.gateway}:7443 --node node132 "
                         f"--python {_node_python()} --set {shlex.quote(bad)}")
        assert run.returncode == 2, f"--set {bad!r}: exit {run.returncode}: {run.stderr[-600:]}"
        assert not m.upper("/etc/llmgw/agent.yaml.new").exists(), f"--set {bad!r} left agent.yaml.new"


def test_an_agent_yaml_refused_by_the_check_keeps_the_old_certificates(
    installed: tuple[Machine, Path, Path], tmp_path: Path
) -> None:
    """Found by an attack review.
    install-node.sh replaces /etc/llmgw/pki/{ca.crt,node.crt,node.key} before it writes and checks agent.yaml.
    When `llmgw agent --check` refuses the new agent.yaml it exits 2 saying "the old one is kept", but the
    certificates are already the new ones (and the release already switched): the node is left half re-onboarded,
    old agent.yaml with new certificates, not "each step whole or not at all"."""
    m, here, _ = installed
    before = m.upper("/etc/llmgw/tls/node.crt").read_bytes()
    pki_b = _pki(tmp_path / "pki-b", "node132", m.address)
    run = _inside(m, f"{here}/install-node.sh --control-plane https://{m.gateway}:7443 --node node132 "
                     f"--pki {pki_b} --python {_node_python()} --set heartbeat_interval=banana")
    assert run.returncode == 2 and "agent.yaml would be refused" in run.stderr, run.stdout + run.stderr
    assert m.upper("/etc/llmgw/tls/node.crt").read_bytes() == before, "the refused install replaced the certificate"


# ---------------------------------------------------------------------------------------------------------------
# onboard-node.sh


def test_an_install_cut_off_after_it_finished_is_not_rerun_into_a_bogus_failure(
    tmp_path: Path, bundle: Path, machines: list[Machine]  # noqa: F811
) -> None:
    """Found by an attack review.
    remote() retries any ssh exit 255 with the same command, and the install step is not idempotent: its command
    ends with `rm -rf /opt/llmgw/incoming`. When the connection drops after the remote install ran (here: the
    wrapper returns 255 once the real ssh has finished, as ServerAliveCountMax or a network blip does), the retry
    runs `cd /opt/llmgw/incoming` on a directory that is gone, gets 1, and onboarding says "the install on NAME
    failed" with exit status 1 (undocumented), about a node that is installed and running. (Had the drop come
    mid-install, the retry would run a second install-node.sh beside the first.)"""
    m = booted(tmp_path, machines, "node133", 33, 133)
    flag = tmp_path / "dropped"
    _ssh_wrapper(tmp_path, f"""  *install-node.sh*)
    if [ ! -e {flag} ]; then touch {flag}; {REAL_SSH} "$@"; echo "Connection to node closed." >&2; exit 255; fi ;;""")
    run = subprocess.run(
        _onboard(tmp_path, m, "node133", bundle, "--wait-node", "2", "--admin", "http://127.0.0.1:9"),
        env=_env(tmp_path, SSH_LOG=str(tmp_path / "ssh.log"), LLMGW_ADMIN_TOKEN="x"),
        capture_output=True, text=True, timeout=240,
    )
    out = run.stdout + run.stderr
    assert m.upper("/opt/llmgw/.venv").is_symlink(), f"the first install did not complete: {out}"
    assert run.returncode in DOCUMENTED_ONBOARD_CODES, f"exit {run.returncode}:\n{out}"
    assert "the install on node133 failed" not in out, out


def test_a_copy_that_fails_its_check_leaves_no_node_key_on_the_machine(
    tmp_path: Path, bundle: Path, machines: list[Machine]  # noqa: F811
) -> None:
    """Found by an attack review.
    The node's private key travels in /opt/llmgw/incoming/pki/node.key and is removed only by the install step's
    own `rm -rf`. When the copied bundle fails its sha256 check (damaged in transit: here the wrapper appends a
    byte to the copy before the check), onboarding dies with 4 and leaves the key on the machine."""
    m = booted(tmp_path, machines, "node134", 34, 134)
    _ssh_wrapper(tmp_path, f"""  *"sha256sum --quiet -c"*)
    {REAL_SSH} "${{@:1:$#-1}}" "printf x >> /opt/llmgw/incoming/{bundle.name}" ;;""")
    run = subprocess.run(_onboard(tmp_path, m, "node134", bundle),
                         env=_env(tmp_path, SSH_LOG=str(tmp_path / "ssh.log")), capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 4 and "does not match" in run.stderr, run.stdout + run.stderr
    assert not m.upper("/opt/llmgw/incoming/pki/node.key").exists(), "the node's private key was left behind"


def test_what_the_machine_prints_cannot_drive_the_operators_terminal(
    tmp_path: Path, bundle: Path, machines: list[Machine]  # noqa: F811
) -> None:
    """Found by an attack review.
    onboard-node.sh prints the remote's words raw: `remote hostname` into "the machine calls itself ...", the
    remote command's stderr (`cat "$err"`), install-node.sh's output, `systemctl status`. The machine is trusted
    on first use only, yet it can send terminal escapes (retitle the window, rewrite earlier lines, OSC 52 the
    clipboard). `llmgw ctl` strips them from node-supplied text (ctl.safe); onboarding does not. Here the machine's
    hostname carries an OSC sequence."""
    _need_machine()
    m = Machine(tmp_path / "machine", name="node135", address="10.251.35.135", gateway="10.251.35.1")
    machines.append(m)
    m.boot()
    assert m.init is not None
    subprocess.run(["nsenter", "-t", str(m.init.pid), "-u", sys.executable, "-c",
                    "import socket; socket.sethostname('evil\\x1b]0;owned\\x07\\x1b[2J')"], check=True)
    m.start_sshd()
    init_ca(tmp_path / "pki")
    run = subprocess.run(_onboard(tmp_path, m, "node135", bundle), env=_env(tmp_path), capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 3, run.stdout + run.stderr  # the hostname is not the node's
    assert "\x1b" not in run.stdout + run.stderr, repr((run.stdout + run.stderr)[-600:])


def test_onboarding_leaves_its_standard_input_to_the_caller(
    tmp_path: Path, bundle: Path, machines: list[Machine]  # noqa: F811
) -> None:
    """Found by an attack review.
    Every ssh in remote() inherits the script's stdin (no -n, no </dev/null), and ssh forwards whatever is there
    to the remote command. `while read name addr; do scripts/onboard-node.sh "$name" "$addr" ...; done < nodes`,
    the obvious way to add several nodes, onboards the first and silently drops the rest of the list."""
    m = booted(tmp_path, machines, "debian", 36, 136)
    argv = " ".join(shlex.quote(a) for a in _onboard(tmp_path, m, "node136", bundle))
    run = subprocess.run(["bash", "-c", f"{argv}; echo rc=$?; cat"], input="node137 10.251.36.137\n",
                         env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert "rc=3" in run.stdout, run.stdout + run.stderr
    assert "node137 10.251.36.137" in run.stdout, "onboarding swallowed the caller's stdin (the next node's line)"


def test_the_node_key_is_not_sent_to_a_machine_that_is_not_the_node(
    tmp_path: Path, bundle: Path, machines: list[Machine]  # noqa: F811
) -> None:
    """Found by an attack review.
    onboard-node.sh learns the machine's hostname (`remote hostname`) before copying, but does not compare it with
    NAME: the node's private key is shipped to whatever machine answers at ADDRESS (a typo, an address reused)
    and only then does install-node.sh refuse it (exit 3). The key has been in another machine's hands."""
    m = booted(tmp_path, machines, "debian", 37, 137)
    log = tmp_path / "ssh.log"
    _ssh_wrapper(tmp_path, "  *) ;;")
    run = subprocess.run(_onboard(tmp_path, m, "node137", bundle), env=_env(tmp_path, SSH_LOG=str(log)),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode in (3, 5), run.stdout + run.stderr
    copies = [c for c in log.read_text().splitlines() if "tar -xf -" in c]
    assert not copies, f"the key went to a machine calling itself 'debian', not node137: {copies}"


def test_the_ssh_keygen_command_offered_for_a_changed_key_works_with_ssh_port(
    tmp_path: Path, machines: list[Machine]  # noqa: F811
) -> None:
    """Found by an attack review.
    With --ssh-port P (not 22) ssh records the key as `[ADDRESS]:P`, but the refusal (exit 5) tells the operator
    to run `ssh-keygen -f KNOWN_HOSTS -R ADDRESS`, which removes nothing: following it, onboarding refuses again."""
    _need_machine()
    m = Machine(tmp_path / "machine", name="node138", address="10.251.38.138", gateway="10.251.38.1")
    machines.append(m)
    m.boot()
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
        [str(SCRIPTS / "onboard-node.sh"), "node138", m.address, "--control-plane", "https://10.251.38.1:7443",
         "--ca", str(tmp_path / "pki"), "--bundle", str(dummy), "--identity", str(m.client_key),
         "--known-hosts", str(kh), "--ssh-port", "2222", "--wait-ssh", "20"],
        env=_env(tmp_path), capture_output=True, text=True, timeout=60,
    )
    assert run.returncode == 5, run.stdout + run.stderr
    advice = re.search(r"(ssh-keygen -f \S+ -R \S+)", run.stderr)
    assert advice, run.stderr
    subprocess.run(shlex.split(advice.group(1).rstrip(",")), capture_output=True, check=True)
    left = subprocess.run(["ssh-keygen", "-F", f"[{m.address}]:2222", "-f", str(kh)], capture_output=True)
    assert left.returncode != 0, f"`{advice.group(1)}` left the changed key's entry in place"


def test_a_copy_failure_that_is_not_ssh_is_not_waited_out_as_ssh(
    tmp_path: Path, bundle: Path, machines: list[Machine]  # noqa: F811
) -> None:
    """Found by an attack review.
    copy() retries every failure, not only ssh's 255, until the --wait-ssh deadline (default 300 s), saying
    "waiting for ssh ... to copy again" although ssh answers every time: a full disk, a read-only /opt, or a
    non-root --ssh-user that cannot create /opt/llmgw/incoming holds onboarding for five minutes and misnames
    the cause. Here /opt/llmgw is a file on the machine, so `mkdir -p /opt/llmgw/incoming` fails each time."""
    _need_machine()
    m = Machine(tmp_path / "machine", name="node139", address="10.251.39.139", gateway="10.251.39.1")
    machines.append(m)
    m.boot()
    assert _inside(m, "echo not-a-directory > /opt/llmgw").returncode == 0
    m.start_sshd()
    init_ca(tmp_path / "pki")
    argv = _onboard(tmp_path, m, "node139", bundle)
    argv[argv.index("--wait-ssh") + 1] = "3"
    run = subprocess.run(argv, env=_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert run.returncode == 4, run.stdout + run.stderr
    assert "to copy again" not in run.stdout, run.stdout


def test_an_address_that_is_not_an_ip_is_wrong_use(tmp_path: Path) -> None:
    """Found by an attack review.
    ADDRESS is never checked: a host name (gpu12.lan) reaches `llmgw ca issue --ip gpu12.lan`, which refuses it,
    and onboarding exits 4 "could not issue the certificate" (a step failed) instead of 2 (wrong use)."""
    init_ca(tmp_path / "pki")
    dummy = tmp_path / "llmgw-0-cp311-x86_64.tar.gz"
    dummy.write_bytes(b"x")
    subprocess.run(f"sha256sum {dummy.name} > {dummy.name}.sha256", shell=True, cwd=tmp_path, check=True)
    run = subprocess.run(
        [str(SCRIPTS / "onboard-node.sh"), "gpu12", "gpu12.lan", "--control-plane", "https://cp:7443",
         "--ca", str(tmp_path / "pki"), "--bundle", str(dummy), "--known-hosts", str(tmp_path / "kh")],
        env=_env(tmp_path), capture_output=True, text=True, timeout=60,
    )
    assert run.returncode == 2, f"exit {run.returncode}: {run.stderr}"


# ---------------------------------------------------------------------------------------------------------------
# build-bundle.sh


def test_a_bundle_built_from_head_has_head_installers(tmp_path: Path) -> None:
    """Found by an attack review.
    Without --tree the bundle is "from the committed HEAD (git archive): what a release is", and RELEASE says
    source=commit. But install-release.sh, install-node.sh, the systemd units and requirements.lock are taken from
    the working tree ($root/...), not from the archive ($src): an uncommitted edit of install-node.sh ships in a
    release that says it is commit X."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for part in (".git", "scripts", "deploy"):
        shutil.copytree(ROOT / part, repo / part, symlinks=True)
    shutil.copy(ROOT / "requirements.lock", repo / "requirements.lock")
    with (repo / "scripts" / "install-node.sh").open("a") as f:
        f.write("# UNCOMMITTED EDIT\n")
    run = subprocess.run([str(repo / "scripts" / "build-bundle.sh"), "--out", str(tmp_path / "dist"),
                          "--python", sys.executable], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    here = _unpack(Path(run.stdout.strip().splitlines()[-1]), tmp_path / "b")
    release = (here / "RELEASE").read_text()
    shipped = (here / "install-node.sh").read_text()
    assert "UNCOMMITTED EDIT" not in shipped or "source=commit" not in release, release


# ---------------------------------------------------------------------------------------------------------------
# llmgw ctl nodes wait


def test_nodes_wait_rides_out_a_connection_dropped_by_a_restarting_api(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by an attack review.
    `ctl nodes wait` retries ApiRefused and URLError only. A connection the management API closes without an
    answer (a server restarting, a proxy) raises http.client.RemoteDisconnected, which urllib does not wrap;
    likewise a read timeout (TimeoutError) or a 200 that is not JSON. The wait then dies at once with a
    traceback (exit 1) instead of retrying until --timeout, and onboarding reports the node as not registered."""
    row = {"node": "n1", "state": "live", "cert_serial": "", "address": "10.0.0.1", "gpus": "none", "ram": "-",
           "engines": "none", "fabrics": "-", "warnings": [], "conditions": []}
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    port = srv.getsockname()[1]

    def serve() -> None:
        n = 0
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            n += 1
            c.recv(65536)
            if n > 1:
                body = json.dumps([row]).encode()
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                          b"Content-Length: %d\r\n\r\n" % len(body) + body)
            c.close()  # the first: closed with no answer

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    monkeypatch.setenv("LLMGW_ADMIN_TOKEN", "t")
    try:
        out = CliRunner().invoke(app, ["ctl", "nodes", "wait", "n1", "--timeout", "10", "--json",
                                       "--admin", f"http://127.0.0.1:{port}"])
    finally:
        srv.close()
    assert out.exit_code == 0 and out.exception is None, repr(out.exception)
    assert json.loads(out.stdout)["state"] == "live"


# ---------------------------------------------------------------------------------------------------------------
# the doc test (tests/docs/test_commands.py)


REQUIRED = ("```sh\nllmgw ctl nodes wait gpu12 --timeout 5\nllmgw ca issue /etc/llmgw/pki gpu12\n"
            "llmgw server --check -c /etc/llmgw/server.yaml\nllmgw agent --check -c /etc/llmgw/agent.yaml\n```\n")


def _doc(tmp: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    doc = tmp / "x.md"
    doc.write_text(text)
    monkeypatch.setattr(doc_test, "DOCS", [doc])
    monkeypatch.setattr(doc_test, "STRICT", [doc])


def test_the_doc_test_sees_a_subcommand_typo_after_an_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by an attack review.
    The command check descends into subcommands only while the next word is one; `llmgw ctl nodes --json wiat
    gpu12` stops at `nodes`, the option is the group's, and the misspelt subcommand after it is never looked at."""
    _doc(tmp_path, monkeypatch, REQUIRED + "```sh\nllmgw ctl nodes --json wiat gpu12\n```\n")
    with pytest.raises(AssertionError, match="wiat"):
        doc_test.test_every_llmgw_command_the_docs_print_exists_with_its_options()


def test_the_doc_test_sees_a_command_in_a_code_span_broken_across_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by an attack review.
    Inline code is found with `([^`\\n]+)`, but Markdown code spans may cross a line break (install.md has one:
    "`llmgw server --check -c\\n/etc/llmgw/server.yaml`"). Such a span is skipped, and the backticks after it
    pair up wrongly for the rest of the line, so its command (here a misspelt `ca isue`) is never checked."""
    _doc(tmp_path, monkeypatch, REQUIRED + "Then run `llmgw ca\nisue /etc/llmgw/pki gpu12` on the CA host.\n")
    with pytest.raises(AssertionError, match="isue"):
        doc_test.test_every_llmgw_command_the_docs_print_exists_with_its_options()


def test_the_doc_test_checks_the_keys_inside_a_set_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by an attack review.
    For `--set KEY=VALUE` the doc test checks only KEY against AgentConfig's top level; the YAML value is never
    validated, so node-onboarding.md's `--set 'fabrics=[{name: ib-a, adapters: [...]}]'` and `--set
    'engines={llamacpp: {path: ...}}'` could misspell every nested key (adaptors, pth) and still pass."""
    _doc(tmp_path, monkeypatch,
         "```sh\nscripts/onboard-node.sh gpu12 10.0.0.12 --control-plane https://cp:7443 \\\n"
         "  --set 'fabrics=[{name: ib-a, adaptors: [mlx5_0]}]'\n```\n")
    with pytest.raises(AssertionError):
        doc_test.test_every_config_key_the_docs_name_exists()
