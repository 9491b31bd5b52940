"""An engine whose health answers while its completions hang is not ready: the supervisor asks an idle engine for
one token now and then (liveness.py), and says why when no answer comes. Real sim engines; the clock is fake."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from llmgw.agent.supervisor import Supervisor
from llmgw.agent.supervisor.liveness import IDLE_EVERY_S, WEDGED_EVERY_S, idle
from llmgw.agent.supervisor.supervisor import HEALTH_FAILURES_BEFORE_UNREADY
from llmgw.core.clock import FakeClock
from llmgw.wire.messages import EngineLoad, ShardState
from tests.agent.supervisor.test_engine_load import reported, sim, spec
from tests.harness import await_until, free_port


async def state(s: Supervisor, want: str, reason: str = "") -> ShardState:
    async def check() -> ShardState | None:
        st = await reported(s)
        return st if st.state == want and st.reason == reason else None

    got: ShardState = await await_until(check, 20, f"the shard {want} {reason}")
    return got


async def probed(s: Supervisor) -> None:
    """Until the completion probe started by the last tick has finished and been taken in."""
    async def done() -> bool:
        await s.tick()
        (sp,) = s.shards.values()
        return sp.liveness.task is None

    await await_until(done, 20, "the completion probe answered or timed out")


async def test_an_idle_engine_whose_completions_hang_is_reported_not_ready_with_why(tmp_path: Path) -> None:
    clock = FakeClock()
    s = Supervisor(clock, tmp_path, "127.0.0.1", sim, answer_within=1.0)
    await s.converge([spec(free_port(), "--fault", "hang")])
    try:
        await state(s, "ready")  # its health answers
        clock.advance(IDLE_EVERY_S)
        await s.tick()  # the probe is due: it starts, beside the loop
        st = await state(s, "unresponsive", "EngineUnresponsive")  # it served: not "starting"
        assert "a one-token completion got no answer within 1s" in st.message, st.message
        assert not s.settling(), "a hung engine is probed at its own pace, not every tenth of a second"
        await s.tick()  # its health still answers: it stays out of ready
        assert s.states()[0].reason == "EngineUnresponsive"
    finally:
        await s.close()


@contextlib.asynccontextmanager
async def found_unresponsive(tmp_path: Path) -> AsyncIterator[tuple[Supervisor, FakeClock]]:
    """A healthy sim engine taken for hung by a probe no engine answers in time; the next probes wait 20 s."""
    clock = FakeClock()
    s = Supervisor(clock, tmp_path, "127.0.0.1", sim, answer_within=0.0001)
    await s.converge([spec(free_port())])
    try:
        await state(s, "ready")
        clock.advance(IDLE_EVERY_S)
        await s.tick()
        await state(s, "unresponsive", "EngineUnresponsive")
        s.answer_within = 20.0
        yield s, clock
    finally:
        await s.close()


async def test_an_engine_found_unresponsive_is_ready_again_once_it_answers(tmp_path: Path) -> None:
    async with found_unresponsive(tmp_path) as (s, clock):
        clock.advance(WEDGED_EVERY_S)  # asked again sooner while it is out
        await s.tick()
        await probed(s)
        assert s.states()[0].state == "ready" and s.states()[0].message == ""


async def test_an_engine_that_answers_stays_ready_and_is_asked_again_a_minute_later(tmp_path: Path) -> None:
    clock = FakeClock()
    s = Supervisor(clock, tmp_path, "127.0.0.1", sim)
    await s.converge([spec(free_port())])
    try:
        await state(s, "ready")
        (sp,) = s.shards.values()
        assert sp.liveness.due_at == clock.monotonic() + IDLE_EVERY_S  # not at once: it just proved it loads
        clock.advance(IDLE_EVERY_S)
        await s.tick()
        assert sp.liveness.task is not None
        await probed(s)
        assert s.states()[0].state == "ready"
        assert sp.liveness.due_at == clock.monotonic() + IDLE_EVERY_S
    finally:
        await s.close()


def test_only_an_idle_engine_is_asked() -> None:
    assert idle(None) and idle(EngineLoad(running=0, waiting=0)) and idle(EngineLoad())
    assert not idle(EngineLoad(running=1, waiting=0)) and not idle(EngineLoad(running=0, waiting=2))


async def test_an_engine_stopped_after_it_served_is_unresponsive_with_since_when_and_probes_missed(
        tmp_path: Path) -> None:
    """SIGSTOP: its socket accepts, nothing answers. It served, so it is not "starting": the shard says since when
    it has not answered and how many health probes it missed; once let go on it is ready again."""
    import os
    import signal

    clock = FakeClock(1_800_000_000.0)
    s = Supervisor(clock, tmp_path, "127.0.0.1", sim)
    await s.converge([spec(free_port())])
    try:
        await state(s, "ready")
        (sp,) = s.shards.values()
        assert sp.proc is not None
        clock.advance(5)  # the last answer was at 08:00:00 UTC by this clock
        os.kill(sp.proc.pid, signal.SIGSTOP)
        try:
            st = await state(s, "unresponsive", "EngineUnresponsive")
            assert st.message.startswith("not answering since 2027-01-15 08:00:00 UTC: 3 health probes missed"), \
                st.message
            assert "TimeoutError" in st.message, st.message
            assert not s.settling(), "a hung engine is probed at each heartbeat, not every tenth of a second"
            st = await reported(s)
            assert st.state == "unresponsive" and "4 health probes missed" in st.message, st.message
        finally:
            os.kill(sp.proc.pid, signal.SIGCONT)
        await state(s, "ready")
    finally:
        await s.close()


async def test_an_engine_that_never_answered_is_starting_not_unresponsive(tmp_path: Path) -> None:
    """Stopped before it ever served: however many probes go unanswered, it is still starting."""
    import os
    import signal

    s = Supervisor(FakeClock(), tmp_path, "127.0.0.1", sim)
    await s.converge([spec(free_port())])
    (sp,) = s.shards.values()
    assert sp.proc is not None and s.states()[0].state == "starting"
    os.kill(sp.proc.pid, signal.SIGSTOP)
    try:
        for _ in range(HEALTH_FAILURES_BEFORE_UNREADY + 1):  # more than the misses that take a served engine out
            st = await reported(s)
            assert st.state == "starting" and st.reason == "", st
            assert st.message.startswith("waiting for health"), st.message
    finally:
        os.kill(sp.proc.pid, signal.SIGCONT)
        await s.close()
