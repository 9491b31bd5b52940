"""A wedged replica (its /health answers, its completions never do) is ejected from routing after three failures in
a row, and the client's requests succeed on the other replica; it comes back after its ejection, and is ejected
for longer if it still fails."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
from aiohttp import web

from llmgw.config.server import ModelSpec, RouterConfig, ServerConfig, TLSFiles
from llmgw.core.clock import FakeClock
from llmgw.router.table import EJECT_AFTER, EJECT_BASE_S
from llmgw.sim.behaviour import Behaviour
from llmgw.sim.server import make_app
from llmgw.store.sqlite import SqliteStore
from tests.harness import free_port
from tests.router.conftest import serving
from tests.router.fakes import FakeState


@contextlib.asynccontextmanager
async def replicas(tmp_path: Path) -> AsyncIterator[tuple[str, str, FakeState, FakeClock]]:
    runners = []
    spec = ModelSpec(name="m", source="org/m", engine="sim", scaling={"min": 2, "max": 2})  # type: ignore[arg-type]
    cfg = ServerConfig(tls=TLSFiles(ca="x", cert="x", key="x"), models=[spec],
                       router=RouterConfig(first_byte_timeout=0.5, expose_routing=True))
    store = SqliteStore(tmp_path / "llmgw.db").open()
    clock = FakeClock()
    state = FakeState(cfg.models, clock, store)
    for rid, fault in (("r1-hung", "hang"), ("r2", "")):
        runner = web.AppRunner(make_app("m", tokens=2, behaviour=Behaviour(fault=fault)),  # type: ignore[arg-type]
                               shutdown_timeout=0.5)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        runners.append(runner)
        state.put_ready(rid, "m", f"http://127.0.0.1:{port}")
    try:
        async with serving(state, store, cfg, "t") as (url, _, key):
            yield url, key, state, clock
    finally:
        for r in runners:
            await r.cleanup()
        store.close()


async def chat(url: str, key: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as s, s.post(
        url + "/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        headers={"Authorization": f"Bearer {key}"},
    ) as r:
        await r.read()
        return r.status, r.headers.get("X-Llmgw-Route", "")


async def test_a_hung_replica_is_ejected_and_requests_succeed_on_the_other(tmp_path: Path) -> None:
    async with replicas(tmp_path) as (url, key, state, clock):
        seen = [await chat(url, key) for _ in range(EJECT_AFTER)]  # idle both: the first listed, the hung one
        assert [s for s, _ in seen] == [504] * EJECT_AFTER and all("replica=r1-hung" in r for _, r in seen)
        assert [rid for rid, _ in state.ejections] == ["r1-hung"]
        assert f"ejected from routing for {EJECT_BASE_S:.0f}s after {EJECT_AFTER} failed" in state.ejections[0][1]
        for _ in range(5):
            status, route = await chat(url, key)
            assert status == 200 and "replica=r2" in route
        clock.advance(EJECT_BASE_S + 1)  # back in rotation: still hung, ejected again, for twice as long
        again = [await chat(url, key) for _ in range(EJECT_AFTER)]
        assert [s for s, _ in again] == [504] * EJECT_AFTER
        assert len(state.ejections) == 2 and f"for {2 * EJECT_BASE_S:.0f}s" in state.ejections[1][1]
        assert (await chat(url, key))[0] == 200
