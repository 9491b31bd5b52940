"""A shard told to sleep is put to sleep by its engine (a real sim process) without a restart, reports "sleeping"
with reason Sleeping once its GPU memory is freed, and is woken when told 0; an engine that leaks at level 1 is put
to sleep at level 2, and one that frees nothing at either level fails with SleepFailed and the numbers. A level-2
sleeper, whose weights were discarded, wakes answering what it answered before: a bare wake would leave it answering
200 with garbage."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from llmgw.agent.supervisor import Supervisor
from llmgw.core.clock import FakeClock
from llmgw.wire.messages import ShardSpec, ShardState
from tests.agent.supervisor.test_engine_load import KEY, sim
from tests.harness import await_until, free_port


def spec(port: int, sleep: int, *args: str) -> ShardSpec:
    return ShardSpec(replica_id="r1", model="m", engine="sim", source="org/m", rank=0, world_size=1, serve_port=port,
                     api_key=KEY, args=["--gpu-memory-mb", "1000", *args], can_sleep=True, sleep=sleep)  # type: ignore[arg-type]


async def until(s: Supervisor, state: str, what: str) -> ShardState:
    async def reached() -> ShardState | None:
        await s.tick()
        st = s.states()[0]
        return st if st.state == state else None
    got: ShardState = await await_until(reached, 20, what)
    return got


async def asleep_at(s: Supervisor, level: int) -> None:
    async def reached() -> bool:
        await s.tick()
        return s.shards[("r1", 0)].sleep.level == level
    await await_until(reached, 20, f"asleep at level {level}")


async def completion(port: int) -> int:
    body = {"model": "m", "prompt": "hi", "max_tokens": 1}
    async with aiohttp.ClientSession() as http, http.post(
            f"http://127.0.0.1:{port}/v1/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}) as r:
        return r.status


async def answer(port: int) -> str:
    body = {"model": "m", "prompt": "hi", "max_tokens": 4}
    async with aiohttp.ClientSession() as http, http.post(
            f"http://127.0.0.1:{port}/v1/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}) as r:
        assert r.status == 200, await r.text()
        return str((await r.json())["choices"][0]["text"])


async def test_a_level_two_sleeper_wakes_with_its_weights(tmp_path: Path) -> None:
    s = Supervisor(FakeClock(), tmp_path, "127.0.0.1", sim)
    port = free_port()
    try:
        await s.converge([spec(port, 0)])
        ready = await until(s, "ready", "the engine ready")
        right = await answer(port)
        await s.converge([spec(port, 2)])
        await asleep_at(s, 2)
        await s.converge([spec(port, 0)])
        st = await until(s, "ready", "awake and ready again")
        assert st.pid == ready.pid, st
        assert await answer(port) == right
    finally:
        await s.close()


async def test_a_shard_sleeps_in_place_and_wakes_when_told(tmp_path: Path) -> None:
    s = Supervisor(FakeClock(), tmp_path, "127.0.0.1", sim)
    port = free_port()
    try:
        await s.converge([spec(port, 0)])
        ready = await until(s, "ready", "the engine ready")
        await s.converge([spec(port, 1)])
        st = await until(s, "sleeping", "asleep")
        await asleep_at(s, 1)
        st = s.states()[0]
        assert (st.state, st.reason, st.pid) == ("sleeping", "Sleeping", ready.pid), st  # the same process
        assert "asleep at level 1: 0 MiB of 1000 MiB still held" in st.message
        assert await completion(port) == 503  # the engine itself refuses while asleep
        await s.converge([spec(port, 0)])
        st = await until(s, "ready", "awake and ready again")
        assert st.pid == ready.pid and await completion(port) == 200
    finally:
        await s.close()


async def test_a_leak_at_level_one_falls_back_to_level_two(tmp_path: Path) -> None:
    s = Supervisor(FakeClock(), tmp_path, "127.0.0.1", sim)
    port = free_port()
    try:
        await s.converge([spec(port, 1, "--sleep-leak-mb", "600")])
        await until(s, "ready", "the engine ready")
        await asleep_at(s, 2)
        st = s.states()[0]
        assert (st.state, st.reason) == ("sleeping", "Sleeping") and "asleep at level 2" in st.message, st
    finally:
        await s.close()


async def test_an_engine_that_frees_nothing_fails_with_the_reason(tmp_path: Path) -> None:
    s = Supervisor(FakeClock(), tmp_path, "127.0.0.1", sim)
    port = free_port()
    try:
        await s.converge([spec(port, 1, "--sleep-leak-mb", "900", "--sleep-leak-deep")])
        st = await until(s, "failed", "failed to sleep")
        assert st.reason == "SleepFailed", st
        assert st.message == ("GPU memory not freed after sleep: level 1 left 900 MiB of 1000 MiB held; "
                              "level 2 left 900 MiB of 1000 MiB held")
        assert st.pid is not None  # still running, awake: the control plane stops it
        assert await completion(port) == 200
    finally:
        await s.close()


async def test_a_completion_probe_answered_while_it_sleeps_leaves_no_verdict_after_the_wake(tmp_path: Path) -> None:
    """The agent's idle completion probe may be in flight when the sleep begins, and be refused by the sleeping
    engine: that refusal says nothing of the engine, and must not mark it unresponsive once woken."""
    s = Supervisor(FakeClock(), tmp_path, "127.0.0.1", sim)
    port = free_port()
    answered = asyncio.Event()

    async def refused_late() -> str:  # the probe's verdict, once the engine is asleep
        await answered.wait()
        return "/v1/completions answered 503: the model is sleeping"
    try:
        await s.converge([spec(port, 0)])
        await until(s, "ready", "the engine ready")
        sp = s.shards[("r1", 0)]
        sp.liveness.task = asyncio.create_task(refused_late())
        await s.converge([spec(port, 1)])
        await asleep_at(s, 1)
        answered.set()
        await s.tick()
        await s.converge([spec(port, 0)])
        st = await until(s, "ready", "awake and ready again")
        assert (st.state, st.reason) == ("ready", ""), st
    finally:
        await s.close()
