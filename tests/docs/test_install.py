"""docs/install.md's one-machine walkthrough, run as written: its release block here (where the package index is),
then its install-serve-ask block on a fresh machine (tests/scripts/machine.py: its own /etc, /opt, /var, no network
beyond loopback, systemd's stand-in), ending in a real answer from llama.cpp through the whole stack."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.scripts.machine import PATH, Machine
from tests.scripts.onboarding_kit import need_machine

pytestmark = pytest.mark.real  # processes: the unit tier leaves this file out (tests/tiers.py)

ROOT = Path(__file__).resolve().parents[2]
INSTALL = ROOT / "docs" / "install.md"


def walkthrough() -> dict[str, str]:
    """The doc's shell blocks whose first line is '# one machine: WHAT', by WHAT."""
    blocks = re.findall(r"```sh\n(.*?)```", INSTALL.read_text(), re.S)
    out = {}
    for b in blocks:
        first, _, _ = b.partition("\n")
        if first.startswith("# one machine:"):
            out[first.removeprefix("# one machine:").strip()] = b
    return out


def test_the_doc_names_its_two_one_machine_blocks() -> None:
    assert list(walkthrough()) == ["the release", "install, serve, ask"]


def test_following_install_md_on_one_machine_gives_a_working_request(tmp_path: Path) -> None:
    need_machine()
    blocks = walkthrough()
    built = subprocess.run(["bash", "-euo", "pipefail", "-c", blocks["the release"]], cwd=ROOT, capture_output=True,
                           text=True, timeout=600)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-3000:]
    m = Machine(tmp_path / "machine", name="solo", number=2)
    try:
        m.boot()
        assert m.init is not None
        env = {"PATH": f"{PATH}:{os.environ['PATH']}", "HOME": "/root", "LANG": "C.UTF-8"}
        run = subprocess.run(
            ["nsenter", "-t", str(m.init.pid), "-m", "-u", "-n", f"--wd={ROOT}", "bash", "-c",
             blocks["install, serve, ask"]],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=400,
        )
        logs = "\n".join(f"== {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                         for p in sorted(m.upper("/var/lib/standin").glob("*.log")))
        assert run.returncode == 0, f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}\n{logs}"
        answer = json.loads(run.stdout.strip().splitlines()[-1])
        assert answer["object"] == "chat.completion" and answer["model"] == "smollm2"
        assert answer["choices"][0]["message"]["content"].strip()
        assert answer["usage"]["completion_tokens"] > 0
    finally:
        m.close()
