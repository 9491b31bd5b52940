"""A next agent adopts an engine's sidecars with the engine; an engine whose sidecar is gone is started again after
it; sidecars left beside an engine nobody adopts are stopped."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from llmgw.agent.engines import Launch
from llmgw.agent.engines.base import Loopback
from llmgw.agent.supervisor import Supervisor, sidecars
from llmgw.agent.supervisor.adopt import find_running, identity
from llmgw.core.clock import FakeClock
from llmgw.core.reasons import Reason
from llmgw.wire.messages import ShardSpec
from tests.agent.supervisor.test_sidecar_order import (
    DEADLINE_S,
    ENGINE,
    SIDECAR,
    _alive,
    _ns,
    _state_is,
    engine_launch,
    shard,
)
from tests.harness import await_until, free_port


async def _left_running(tmp: Path, rec: Path) -> tuple[int, int]:
    """An agent that starts the shard, sees it ready and dies without stopping anything: (engine, sidecar) pids."""
    rec.mkdir()
    (rec / "sidecar.py").write_text(SIDECAR)
    (rec / "engine.py").write_text(ENGINE)
    (rec / "go").touch()
    first = Supervisor(FakeClock(), tmp / "state", "127.0.0.1", engine_launch(rec))
    await first.converge([shard(free_port(), rec, "serve")])
    await await_until(lambda: _state_is(first, "ready"), DEADLINE_S, lambda: f"the shard ready: {first.states()}")
    first.shards.clear()
    await first.close()
    return int((rec / "engine.pid").read_text()), int((rec / "sidecar.pid").read_text())


def _kill(*pids: int) -> None:
    for pid in pids:
        if _alive(pid):
            os.killpg(pid, signal.SIGKILL)


async def test_the_next_agent_adopts_the_sidecar_with_its_engine(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    engine, sidecar = await _left_running(tmp_path, rec)
    s = Supervisor(FakeClock(), tmp_path / "state", "127.0.0.1", engine_launch(rec))
    try:
        s.adopt(find_running(tmp_path / "state"))
        await await_until(lambda: _state_is(s, "ready"), DEADLINE_S, lambda: f"ready: {s.states()}")
        assert s.states()[0].pid == engine and _alive(sidecar), "not adopted: started again"
        os.killpg(sidecar, signal.SIGKILL)  # and it is watched as its own
        st = await await_until(lambda: _state_is(s, "exited"), DEADLINE_S, lambda: f"exited: {s.states()}")
        assert st.reason == Reason.SidecarFailed and "sidecar tok exited (exit code unknown: adopted)" in st.message
        assert not _alive(engine)
    finally:
        await s.close()
        _kill(engine, sidecar)


async def test_an_engine_whose_sidecar_is_gone_is_started_again_after_a_new_one(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    engine, sidecar = await _left_running(tmp_path, rec)
    os.killpg(sidecar, signal.SIGKILL)
    await await_until(lambda: not _alive(sidecar), DEADLINE_S, "the sidecar gone")
    s = Supervisor(FakeClock(), tmp_path / "state", "127.0.0.1", engine_launch(rec))
    try:
        s.adopt(find_running(tmp_path / "state"))
        assert s.shards == {}
        await await_until(lambda: not _alive(engine), DEADLINE_S, "the engine without its sidecar stopped")
        await s.converge([shard(free_port(), rec, "serve")])
        await await_until(lambda: _state_is(s, "ready"), DEADLINE_S, lambda: f"ready again: {s.states()}")
        assert _ns(rec / "engine.started") > _ns(rec / "sidecar.ready")
    finally:
        await s.close()
        _kill(engine, sidecar)


async def test_sidecars_beside_an_engine_nobody_adopts_are_stopped(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    engine, sidecar = await _left_running(tmp_path, rec)
    os.killpg(engine, signal.SIGKILL)  # the engine died while no agent watched
    await await_until(lambda: not _alive(engine), DEADLINE_S, "the engine gone")
    try:
        found = find_running(tmp_path / "state")  # what the next agent does at its start
        assert found == {}
        sidecars.reap(tmp_path / "state", kept=sidecars.beside(found.values()))
        await await_until(lambda: not _alive(sidecar), DEADLINE_S, "the orphaned sidecar stopped")
        assert list((tmp_path / "state").glob("*.run")) == []
    finally:
        _kill(engine, sidecar)


async def test_the_next_agents_start_keeps_the_sidecars_of_engines_still_running(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    engine, sidecar = await _left_running(tmp_path, rec)
    try:
        found = find_running(tmp_path / "state")
        sidecars.reap(tmp_path / "state", kept=sidecars.beside(found.values()))
        assert _alive(sidecar), "a sidecar the next agent is about to adopt was stopped"
        sidecars.stop_recorded(sidecars.beside(found.values()))  # what a stop does with engines never taken over
        await await_until(lambda: not _alive(sidecar), DEADLINE_S, "the sidecar stopped")
    finally:
        _kill(engine, sidecar)


async def test_sidecars_beside_an_engine_the_next_agent_cannot_adopt_are_stopped_with_it(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    engine, sidecar = await _left_running(tmp_path, rec)

    def gone(s: ShardSpec, ports: Loopback) -> tuple[Launch | None, str]:
        return None, "the engine is no longer installed"

    s = Supervisor(FakeClock(), tmp_path / "state", "127.0.0.1", gone)
    try:
        found = find_running(tmp_path / "state")
        sidecars.reap(tmp_path / "state", kept=sidecars.beside(found.values()))
        assert _alive(sidecar), "stopped before the engine beside it was looked at"
        s.adopt(found)
        assert s.shards == {}
        await await_until(lambda: not _alive(engine) and not _alive(sidecar), DEADLINE_S, "both stopped")
        assert list((tmp_path / "state").glob("*.run")) == []
    finally:
        await s.close()
        _kill(engine, sidecar)


async def test_a_run_file_whose_pid_names_another_process_leaves_that_process_alone(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    other = await asyncio.create_subprocess_exec(sys.executable, "-c", "import time; time.sleep(600)",
                                                 start_new_session=True)  # leads its session, as a sidecar does
    try:
        run = state / f"x-0badcafe-rank0.sidecar-tok{sidecars.RUN_SUFFIX}"
        boot = identity(os.getpid()).split("/")[0]
        run.write_text(f"{other.pid} {boot}/1 40000\n")  # its pid reused: that process started at another time
        sidecars.reap(state, kept=set())
        assert not run.exists()
        with pytest.raises(TimeoutError):  # a kill would end it well within this
            await asyncio.wait_for(asyncio.shield(other.wait()), 1.0)
    finally:
        other.kill()
        await other.wait()
