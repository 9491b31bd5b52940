"""Cancelling an install signals apt-get first, never the dpkg it runs: an interrupted dpkg breaks every later
apt-get install on the node until someone runs `dpkg --configure -a`."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from llmgw.agent.installs.packages import PackageTool, apt_install
from llmgw.core.clock import FakeClock
from tests.harness import alive, await_until


async def test_cancelling_an_install_spares_the_dpkg_apt_runs(tmp_path: Path) -> None:
    flag, pid_file = tmp_path / "dpkg-got-TERM", tmp_path / "apt.pid"
    apt = tmp_path / "apt-get"
    # apt-get runs "dpkg" as its child and waits for it, as the real one does
    dpkg_pid = tmp_path / "dpkg.pid"
    apt.write_text(f"""#!/bin/sh
echo $$ > "{pid_file}"
sh -c 'trap "echo TERM > {flag}; exit 1" TERM; echo $$ > {dpkg_pid}.tmp; mv {dpkg_pid}.tmp {dpkg_pid}; i=0; \
while [ $i -lt 30 ]; do sleep 0.1; i=$((i+1)); done' &
wait
""")
    apt.chmod(0o755)
    task = asyncio.create_task(apt_install(PackageTool(apt_get=str(apt)), ["libgomp1"], lambda w: None, FakeClock()))
    await await_until(dpkg_pid.exists, 10, "apt-get running dpkg, its TERM trap set")
    # dpkg lives 3 s (it ends on its own: apt-get waits for it); the signals a cancel sends come well within that
    assert alive(int(dpkg_pid.read_text())), "dpkg ended before the cancel: the test proves nothing"
    task.cancel()  # what Installer._cancel / close does to an install under way
    try:
        await task
    except asyncio.CancelledError:
        pass
    # dpkg writes the flag as it handles a TERM, before it ends: once it is gone, the flag tells
    await await_until(lambda: not alive(int(dpkg_pid.read_text())), 40, "dpkg gone")
    try:
        os.killpg(int(pid_file.read_text()), signal.SIGKILL)  # what this test started, if anything is left
    except (ProcessLookupError, ValueError):
        pass
    assert not flag.exists(), "dpkg, apt-get's child, was sent SIGTERM along with apt-get"
