"""Liveness decides on fresh gauges only: a busy one-slot engine is not asked for a token (and taken out of ready)
on gauges a heartbeat old, and a restarted engine does not inherit its predecessor's verdict."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from llmgw.agent.supervisor import Supervisor
from llmgw.agent.supervisor.liveness import IDLE_EVERY_S
from llmgw.core.clock import FakeClock
from llmgw.wire.messages import ShardSpec
from tests.agent.supervisor.test_engine_load import KEY, sim, spec
from tests.harness import await_until, free_port


async def test_a_busy_one_slot_engine_is_not_probed_on_stale_gauges(tmp_path: Path) -> None:
    clock = FakeClock()
    s = Supervisor(clock, tmp_path, "127.0.0.1", sim, answer_within=2.0)
    port = free_port()
    busy = spec(port, "--max-running", "1", "--tokens", "1000", "--tokens-per-second", "5")  # one slot, 200 s
    loading = ShardSpec(replica_id="r2", model="m2", engine="sim", source="org/m2", rank=0, world_size=1,
                        serve_port=free_port(), api_key=KEY, args=["--load-seconds", "600"])
    await s.converge([busy, loading])
    try:
        async def ready_and_idle() -> bool:
            await s.tick()  # a heartbeat's full tick: the ready engine's gauges are read
            sp = s.shards[("r1", 0)]
            return sp.state == "ready" and sp.load is not None and sp.load.running == 0
        await await_until(ready_and_idle, 20, "r1 ready with its gauges read, r2 still loading")
        assert s.settling(), "r2 is starting: the agent ticks starting_only every 0.1 s between heartbeats"

        body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        async with aiohttp.ClientSession() as http, http.post(
                f"http://127.0.0.1:{port}/v1/chat/completions", json=body,
                headers={"Authorization": f"Bearer {KEY}"}) as resp:
            assert resp.status == 200
            await resp.content.readline()  # r1's only slot is generating this request now
            clock.advance(IDLE_EVERY_S)  # r1's completion probe falls due between two heartbeats
            await s.tick(starting_only=True)  # what _pause runs every 0.1 s while r2 starts
            sp = s.shards[("r1", 0)]
            probe = sp.liveness.task
            if probe is not None:
                await probe  # the probe queues behind the running request until answer_within
                await s.tick(starting_only=True)
            st = {x.replica_id: x for x in s.states()}["r1"]
            assert st.state == "ready", f"r1 (busy, healthy) taken out of ready: {st.reason}: {st.message}"
            assert probe is None, "a completion probe was sent to an engine whose only slot is busy"
    finally:
        await s.close()


async def test_a_restarted_engine_does_not_inherit_its_predecessors_verdict(tmp_path: Path) -> None:
    """An engine that exited while taken for hung starts again with a fresh liveness: once its health answers it is
    ready, not held out with the dead process's words, and it is probed fast while it starts (settling())."""
    import os
    import signal

    from llmgw.agent.supervisor.liveness import WEDGED_EVERY_S
    from tests.agent.supervisor.test_liveness import found_unresponsive

    async with found_unresponsive(tmp_path) as (s, clock):
        (sp,) = s.shards.values()
        assert sp.proc is not None
        old_pid = sp.proc.pid
        os.killpg(old_pid, signal.SIGKILL)  # the engine dies (OOM, a crash); the supervisor restarts it

        async def restarted() -> bool:
            clock.advance(WEDGED_EVERY_S)
            await s.tick()
            return sp.proc is not None and sp.proc.pid != old_pid and sp.state == "starting"
        await await_until(restarted, 20, "the engine restarted")
        assert s.settling(), "a freshly started engine is not probed every 0.1 s: it is still taken for hung"
