"""An engine is reported only once it is seen to run; one that cannot start says why in its own words."""

from __future__ import annotations

import shutil
from pathlib import Path

from llmgw.agent.installs.probe import probe_engines, probe_llamacpp


async def test_the_installed_llama_server_runs_and_reports_its_version() -> None:
    status = await probe_llamacpp(None)
    assert status is not None and status.runs, status
    assert status.version.startswith("0.6.0")


async def test_present_executable_but_cannot_start_names_the_missing_library(tmp_path: Path) -> None:
    real = await probe_llamacpp(None)
    assert real is not None
    lonely = tmp_path / "llama-server"
    shutil.copy2(real.path, lonely)  # the binary without the shared libraries beside it
    status = await probe_llamacpp(str(lonely))
    assert status is not None and not status.runs
    assert "missing libraries" in status.message and "libllama" in status.message


async def test_only_the_engines_asked_for_are_probed() -> None:
    names = [e.name for e in await probe_engines({}, ["sim"])]
    assert names == ["sim"]
    assert [e.name for e in await probe_engines({}, [])] == []
