"""A real sim engine shard, launched by the Sim adapter and probed by the Supervisor: its own gauges are scraped
with the shard's key and reported with the shard; a scrape that fails says so once and never touches readiness."""

from __future__ import annotations

import dataclasses
import logging
import sys
from pathlib import Path

import aiohttp
import pytest

from llmgw.agent.engines import ADAPTERS, Launch, LaunchContext
from llmgw.agent.engines.base import Loopback
from llmgw.agent.supervisor import Supervisor
from llmgw.core.clock import FakeClock
from llmgw.wire.messages import ShardSpec, ShardState
from tests.harness import await_until, free_port

KEY = "k-engine-load"
NONE = Loopback()  # no loopback ports: the engine binds the replica's port itself


def spec(port: int, *args: str) -> ShardSpec:
    return ShardSpec(replica_id="r1", model="m", engine="sim", source="org/m", rank=0, world_size=1, serve_port=port,
                     api_key=KEY, args=list(args))


def sim(s: ShardSpec, ports: Loopback = NONE) -> tuple[Launch | None, str]:
    ctx = LaunchContext(binary=sys.executable, model_path="org/m", host="127.0.0.1", serve_port=ports.engine)
    return ADAPTERS["sim"].launch(s, ctx), ""


async def reported(s: Supervisor) -> ShardState:
    await s.tick()
    return s.states()[0]


async def test_an_idle_engine_reports_nothing_running_and_one_held_stream_as_one(tmp_path: Path) -> None:
    clock = FakeClock()
    s = Supervisor(clock, tmp_path, "127.0.0.1", sim)
    port = free_port()
    # slow enough that a stream opened below is still being generated whatever the machine's speed (200 s)
    await s.converge([spec(port, "--tokens", "1000", "--tokens-per-second", "5")])
    try:
        async def idle() -> ShardState | None:
            st = await reported(s)
            return st if st.state == "ready" and st.load is not None else None

        st = await await_until(idle, 20, "a ready shard with its load")
        assert st.load is not None
        assert (st.load.running, st.load.waiting, st.load.kv_cache_usage) == (0, 0, None)
        assert st.load.at == clock.now(), "read at the node's clock"

        body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        headers = {"Authorization": f"Bearer {KEY}"}
        async with aiohttp.ClientSession() as http, \
                http.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, headers=headers) as resp:
            assert resp.status == 200
            await resp.content.readline()  # the first event: the engine is generating this request now

            async def one() -> bool:
                st = await reported(s)
                return st.load is not None and st.load.running == 1

            await await_until(one, 10, "one request running")
            assert s.states()[0].state == "ready"
        # the client is gone: the engine stops generating at its next token

        async def none() -> bool:
            st = await reported(s)
            return st.load is not None and st.load.running == 0

        await await_until(none, 10, "nothing running once the client left")
    finally:
        await s.close()


async def test_a_failing_scrape_leaves_the_shard_ready_and_is_logged_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    def wrong_page(sp: ShardSpec, ports: Loopback) -> tuple[Launch | None, str]:
        launch, why = sim(sp, ports)
        assert launch is not None
        return dataclasses.replace(launch, metrics_path="/no-such-page"), why

    s = Supervisor(FakeClock(), tmp_path, "127.0.0.1", wrong_page)
    await s.converge([spec(free_port())])
    try:
        with caplog.at_level(logging.WARNING, logger="llmgw.agent.supervisor"):
            async def ready() -> bool:
                return (await reported(s)).state == "ready"

            await await_until(ready, 20, "shard ready")
            for _ in range(5):
                st = await reported(s)
                assert st.state == "ready" and st.load is None
        said = [r.getMessage() for r in caplog.records if "no engine load" in r.getMessage()]
        assert len(said) == 1 and "/no-such-page answered 404" in said[0], said
        assert KEY not in caplog.text
    finally:
        await s.close()


async def test_the_metrics_page_wants_the_key_like_every_other(tmp_path: Path) -> None:
    """Without the shard's key the sim engine refuses its metrics, as it refuses everything else: the supervisor
    reads them only because it sends the key."""
    s = Supervisor(FakeClock(), tmp_path, "127.0.0.1", sim)
    port = free_port()
    await s.converge([spec(port)])
    try:
        async def loaded() -> bool:
            st = await reported(s)
            return st.state == "ready" and st.load is not None

        await await_until(loaded, 20, "a ready shard with its load")
        async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/metrics") as resp:
            assert resp.status == 401
    finally:
        await s.close()


async def test_a_shard_that_is_not_ready_reports_no_load(tmp_path: Path) -> None:
    s = Supervisor(FakeClock(), tmp_path, "127.0.0.1", sim)
    await s.converge([spec(free_port(), "--fail-load", "out of memory")])
    try:
        async def refused() -> ShardState | None:
            st = await reported(s)
            return st if st.reason == "ModelNotLoaded" else None

        st = await await_until(refused, 20, "the shard found not to serve its model")
        assert st.state == "starting" and st.load is None
    finally:
        await s.close()


async def test_the_supervisor_says_when_an_engine_is_starting_so_the_agent_reports_sooner(tmp_path: Path) -> None:
    """While a shard's engine is up and not yet serving, the agent probes it between heartbeats (agent.py _pause)
    and reports the moment it serves, not a whole interval later."""
    s = Supervisor(FakeClock(), tmp_path, "127.0.0.1", sim)
    assert not s.settling()
    await s.converge([spec(free_port())])
    try:
        assert s.settling()  # started, not serving yet

        async def ready() -> bool:
            return (await reported(s)).state == "ready"

        await await_until(ready, 20, "the shard ready")
        assert not s.settling()
    finally:
        await s.close()
