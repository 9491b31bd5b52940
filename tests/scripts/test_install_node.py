"""install-node.sh on a test machine: the agent's hand-over, the node's id, and wrong use refused before anything
on the machine changes."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.scripts.machine import Machine
from tests.scripts.onboarding_kit import SCRIPTS, inside, need_machine, node_pki, node_python, started, unpack_bundle

# its tests share a module fixture that starts processes: one worker runs them all (make test: --dist loadgroup)
pytestmark = pytest.mark.xdist_group("install_node")


def test_the_upgrade_hand_over_signals_only_the_agent_not_its_engines() -> None:
    """install-node.sh hands a running agent over with SIGUSR2 to its main process only: its engines share its
    cgroup, and SIGUSR2 ends them. Read from the script: the test machine's systemctl signals the main PID only."""
    lines = [ln for ln in (SCRIPTS / "install-node.sh").read_text().splitlines()
             if re.match(r"\s*[^#]*\bsystemctl kill\b", ln)]
    assert lines, "install-node.sh no longer hands over with systemctl kill"
    for ln in lines:
        assert re.search(r"--kill-whom[= ]main|--kill-who[= ]main", ln), ln.strip()


def test_set_node_id_other_than_the_node_is_refused_before_anything_is_installed(tmp_path: Path) -> None:
    """`--set node_id=X` for an X other than the node is wrong use, refused before anything is installed."""
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
    tmp_path: Path, bundle: Path, machines: list[Machine]
) -> None:
    """On a machine called node131.lab the agent's id is its certificate's CN (node131), or the install refuses (3)."""
    m = started(tmp_path, machines, "node131.lab", 131)
    here = unpack_bundle(bundle, tmp_path / "b")
    pki = node_pki(tmp_path / "pki", "node131", m.address)
    run = inside(m, f"{here}/install-node.sh --control-plane https://{m.gateway}:7443 --node node131 "
                     f"--pki {pki} --python {node_python()}")
    if run.returncode == 3:
        return  # refused: fine
    assert run.returncode == 0, run.stdout + run.stderr
    said = inside(m, "/opt/llmgw/.venv/bin/python -c 'import socket, yaml; "
                      "c = yaml.safe_load(open(\"/etc/llmgw/agent.yaml\")); "
                      "print(c.get(\"node_id\") or socket.gethostname())'")
    assert said.stdout.strip() == "node131", f"the agent will call itself {said.stdout.strip()!r}, its CN is node131"


@pytest.fixture(scope="module")
def installed(bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Machine, Path, Path]]:
    """A machine (node132) with the release installed and the agent started by install-node.sh, certificate A."""
    need_machine()
    tmp = tmp_path_factory.mktemp("installed")
    m = Machine(tmp / "machine", name="node132", number=132)
    try:
        m.boot()
        here = unpack_bundle(bundle, tmp / "b")
        pki = node_pki(tmp / "pki", "node132", m.address)
        run = inside(m, f"{here}/install-node.sh --control-plane https://{m.gateway}:7443 --node node132 "
                         f"--pki {pki} --python {node_python()}")
        assert run.returncode == 0, run.stdout + run.stderr
        yield m, here, pki
    finally:
        m.close()


def test_a_malformed_set_is_wrong_use_exit_2_not_1(installed: tuple[Machine, Path, Path]) -> None:
    """A --set without '=' or with a value that is not YAML is wrong use (2) and leaves no agent.yaml.new behind."""
    m, here, _ = installed
    for bad in ("novalue", "labels=[unclosed"):
        run = inside(m, f"{here}/install-node.sh --control-plane https://{m.gateway}:7443 --node node132 "
                         f"--python {node_python()} --set {shlex.quote(bad)}")
        assert run.returncode == 2, f"--set {bad!r}: exit {run.returncode}: {run.stderr[-600:]}"
        assert not m.upper("/etc/llmgw/agent.yaml.new").exists(), f"--set {bad!r} left agent.yaml.new"


def test_an_agent_yaml_refused_by_the_check_keeps_the_old_certificates(
    installed: tuple[Machine, Path, Path], tmp_path: Path
) -> None:
    """An agent.yaml refused by `llmgw agent --check` leaves the old certificates in place (each step whole or not)."""
    m, here, _ = installed
    before = m.upper("/etc/llmgw/tls/node.crt").read_bytes()
    pki_b = node_pki(tmp_path / "pki-b", "node132", m.address)
    run = inside(m, f"{here}/install-node.sh --control-plane https://{m.gateway}:7443 --node node132 "
                     f"--pki {pki_b} --python {node_python()} --set heartbeat_interval=banana")
    assert run.returncode == 2 and "agent.yaml would be refused" in run.stderr, run.stdout + run.stderr
    assert m.upper("/etc/llmgw/tls/node.crt").read_bytes() == before, "the refused install replaced the certificate"

