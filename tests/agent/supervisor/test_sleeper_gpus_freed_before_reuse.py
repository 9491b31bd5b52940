"""The control plane counts a sleeper's GPUs free the moment it tells it to sleep, and may place another replica on
them in the same desired state: the node starts that engine only once the sleeper's engine has freed them (on a
real GPU it would find the memory still held), and never while one that failed to free them still runs."""

from __future__ import annotations

import asyncio
from pathlib import Path

from llmgw.agent.supervisor import Supervisor
from llmgw.core.clock import FakeClock
from llmgw.wire.messages import ShardSpec
from tests.agent.supervisor.test_engine_load import sim
from tests.agent.supervisor.test_sleep_and_wake import spec, until
from tests.harness import await_until, free_port


def sleeper(port: int, level: int, *args: str) -> ShardSpec:
    return spec(port, level, *args).model_copy(update={"gpus": [0, 1]})


def taker(port: int) -> ShardSpec:
    return spec(port, 0).model_copy(update={"replica_id": "r2", "gpus": [1], "can_sleep": False})


async def test_the_engine_taking_a_sleepers_gpus_starts_once_it_sleeps(tmp_path: Path) -> None:
    s = Supervisor(FakeClock(), tmp_path, "127.0.0.1", sim)
    p1, p2 = free_port(), free_port()
    try:
        await s.converge([sleeper(p1, 0)])
        await until(s, "ready", "the sleeper's engine ready")
        await s.converge([sleeper(p1, 1), taker(p2)])
        first, second = s.shards[("r1", 0)], s.shards[("r2", 0)]
        assert second.proc is None or (first.sleep.level and first.sleep.task is None), "started on held GPUs"
        assert second.proc is not None or "waiting for the engine of r1 to free its GPUs" in second.message

        async def both() -> bool:
            await s.tick()
            return first.sleep.level == 1 and second.state == "ready"
        await await_until(both, 20, lambda: f"asleep, and the other ready: {s.states()}")
    finally:
        await s.close()


async def test_it_never_starts_while_a_sleeper_that_freed_nothing_runs(tmp_path: Path) -> None:
    s = Supervisor(FakeClock(), tmp_path, "127.0.0.1", sim)
    p1, p2 = free_port(), free_port()
    leaks = ("--sleep-leak-mb", "900", "--sleep-leak-deep")
    try:
        await s.converge([sleeper(p1, 0, *leaks)])
        await until(s, "ready", "the sleeper's engine ready")
        await s.converge([sleeper(p1, 1, *leaks), taker(p2)])

        async def failed() -> bool:
            await s.tick()
            return s.shards[("r1", 0)].state == "failed"
        await await_until(failed, 20, "failed to sleep")
        await s.tick()
        assert s.shards[("r2", 0)].proc is None, "started beside an engine still holding its GPUs"
        await s.converge([taker(p2)])  # the control plane stops the one that failed
        await until(s, "ready", "started once the GPUs are free")
    finally:
        await s.close()


async def test_a_sleepers_engine_that_exits_is_not_restarted_awake_on_gpus_another_holds(tmp_path: Path) -> None:
    clock = FakeClock()
    s = Supervisor(clock, tmp_path, "127.0.0.1", sim)
    p1, p2 = free_port(), free_port()
    try:
        await s.converge([sleeper(p1, 0)])
        await until(s, "ready", "the sleeper's engine ready")
        await s.converge([sleeper(p1, 1), taker(p2)])

        async def both() -> bool:
            await s.tick()
            return s.shards[("r1", 0)].sleep.level == 1 and s.shards[("r2", 0)].state == "ready"
        await await_until(both, 20, lambda: f"asleep, and the other ready: {s.states()}")
        first = s.shards[("r1", 0)]
        assert isinstance(first.proc, asyncio.subprocess.Process)
        first.proc.kill()

        async def exited() -> bool:
            await s.tick()
            return first.state == "exited"
        await await_until(exited, 20, "the sleeper's engine exited")
        for _ in range(3):
            clock.advance(600)  # past any restart delay
            await s.tick()
        assert first.state == "exited" and first.proc.returncode is not None, "restarted on GPUs another holds"
        assert "waiting for the engine of r2 to free its GPUs" in first.message
    finally:
        await s.close()


async def test_a_shard_told_to_sleep_whose_engine_does_not_answer_fails_so_its_gpus_come_free(tmp_path: Path) -> None:
    """An engine found unresponsive is never put to sleep (nothing asks it): waiting for it, the engine placed on
    its GPUs would wait for ever. It fails (SleepFailed), the control plane stops it, and the other starts."""
    s = Supervisor(FakeClock(), tmp_path, "127.0.0.1", sim)
    p1, p2 = free_port(), free_port()
    try:
        await s.converge([sleeper(p1, 0)])
        await until(s, "ready", "the sleeper's engine ready")
        first = s.shards[("r1", 0)]
        first.state, first.reason = "unresponsive", "EngineUnresponsive"  # as its probes found it
        await s.converge([sleeper(p1, 1), taker(p2)])
        assert (first.state, first.reason) == ("failed", "SleepFailed"), first
        assert s.shards[("r2", 0)].proc is None
        await s.converge([taker(p2)])
        await until(s, "ready", "started once the GPUs are free")
    finally:
        await s.close()
