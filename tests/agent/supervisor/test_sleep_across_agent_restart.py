"""A next agent that adopts an engine left asleep learns its level from the engine, not from its own blank memory:
told to keep it asleep, it never reports it ready; told to wake it (a request came while no agent ran), it wakes
it before reporting it ready, rather than reporting ready an engine that refuses every completion; and since the
engine does not say at which level it sleeps, it wakes it as from level 2, so one left at level 2 gets its weights
back."""

from __future__ import annotations

from pathlib import Path

from llmgw.agent.supervisor import Supervisor
from llmgw.agent.supervisor.adopt import find_running
from llmgw.core.clock import FakeClock
from tests.agent.supervisor.test_engine_load import sim
from tests.agent.supervisor.test_sleep_and_wake import answer, completion, spec, until
from tests.harness import await_until, free_port


async def left_asleep(state: Path, port: int, level: int = 1, said: list[str] | None = None) -> int:
    """An agent that starts the shard, puts it to sleep at `level` and hands over to the next agent: the engine's
    pid. Its answer before the sleep is added to `said`."""
    first = Supervisor(FakeClock(), state, "127.0.0.1", sim)
    try:
        await first.converge([spec(port, 0)])
        pid = (await until(first, "ready", "the engine ready")).pid
        if said is not None:
            said.append(await answer(port))
        await first.converge([spec(port, level)])

        async def asleep() -> bool:
            await first.tick()
            return first.shards[("r1", 0)].sleep.level == level
        await await_until(asleep, 20, "asleep")
    finally:
        await first.close(keep_engines=True)
    assert pid is not None
    return pid


async def test_adopted_asleep_and_told_to_wake_it_is_woken_before_it_is_ready(tmp_path: Path) -> None:
    port = free_port()
    pid = await left_asleep(tmp_path, port)
    s = Supervisor(FakeClock(), tmp_path, "127.0.0.1", sim)
    try:
        s.adopt(find_running(tmp_path))
        await s.converge([spec(port, 0)])
        st = await until(s, "ready", "ready")
        assert st.pid == pid, "adopted, not started again"
        assert await completion(port) == 200, "reported ready while its engine still sleeps"
    finally:
        await s.close()


async def test_adopted_asleep_at_level_two_it_is_woken_with_its_weights(tmp_path: Path) -> None:
    port = free_port()
    said: list[str] = []
    await left_asleep(tmp_path, port, 2, said)
    s = Supervisor(FakeClock(), tmp_path, "127.0.0.1", sim)
    try:
        s.adopt(find_running(tmp_path))
        await s.converge([spec(port, 0)])
        await until(s, "ready", "ready")
        assert await answer(port) == said[0], "woken without its weights"
    finally:
        await s.close()


async def test_adopted_asleep_and_told_to_sleep_it_is_never_reported_ready(tmp_path: Path) -> None:
    port = free_port()
    await left_asleep(tmp_path, port)
    s = Supervisor(FakeClock(), tmp_path, "127.0.0.1", sim)
    seen: list[str] = []
    try:
        s.adopt(find_running(tmp_path))
        await s.converge([spec(port, 1)])
        seen.append(s.states()[0].state)  # what the first heartbeat after the converge would say

        async def asleep() -> bool:
            await s.tick()
            seen.append(s.states()[0].state)
            return s.shards[("r1", 0)].sleep.level == 1
        await await_until(asleep, 20, "known asleep")
        assert "ready" not in seen and s.states()[0].state == "sleeping", seen
    finally:
        await s.close()


async def test_adopted_asleep_it_is_not_woken_before_the_control_plane_says_so(tmp_path: Path) -> None:
    """The spec on file is from the engine's start (awake): woken on its word, the engine would take GPUs another
    replica may now hold."""
    port = free_port()
    await left_asleep(tmp_path, port)
    s = Supervisor(FakeClock(), tmp_path, "127.0.0.1", sim)
    try:
        s.adopt(find_running(tmp_path))
        await until(s, "sleeping", "found asleep")
        for _ in range(3):
            await s.tick()
        sp = s.shards[("r1", 0)]
        assert sp.sleep.level == 1 and sp.sleep.task is None and s.states()[0].state == "sleeping"
        assert await completion(port) == 503, "woken before the control plane said so"
    finally:
        await s.close()
