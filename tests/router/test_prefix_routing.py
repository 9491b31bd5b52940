"""Prefix-aware routing through the real router: requests sharing a long system prompt go to the replica that was
sent it, unless that one is busier than the margin allows; different prompts spread by load; the policy that
does not look spreads regardless. Each answer says how it was routed (X-Llmgw-Route, router.expose_routing)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
from aiohttp import web

from llmgw.config.server import ModelSpec, RouterConfig, ServerConfig, TLSFiles
from llmgw.core.clock import FakeClock
from llmgw.store.sqlite import SqliteStore
from llmgw.wire.messages import EngineLoad
from tests.harness import free_port
from tests.router.conftest import serving
from tests.router.fakes import FakeState

SYSTEM = "You are a careful assistant. " * 40  # about 1,100 characters: four 256-character blocks


def engine(name: str, seen: list[str]) -> web.Application:
    async def chat(request: web.Request) -> web.Response:
        seen.append(name)
        return web.json_response({"choices": [{"message": {"content": "ok"}}],
                                  "usage": {"prompt_tokens": 1, "completion_tokens": 1}})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


@contextlib.asynccontextmanager
async def two_replicas(tmp_path: Path, routing: str, expose: bool = True
                       ) -> AsyncIterator[tuple[str, str, FakeState, list[str]]]:
    seen: list[str] = []
    runners = []
    urls = []
    for name in ("r1", "r2"):
        runner = web.AppRunner(engine(name, seen))
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        runners.append(runner)
        urls.append(f"http://127.0.0.1:{port}")
    spec = ModelSpec(name="m", source="org/m", engine="sim", routing=routing,  # type: ignore[arg-type]
                     scaling={"min": 2, "max": 2})  # type: ignore[arg-type]
    cfg = ServerConfig(tls=TLSFiles(ca="x", cert="x", key="x"), models=[spec],
                       router=RouterConfig(prefix_margin=2, expose_routing=expose))
    store = SqliteStore(tmp_path / "llmgw.db").open()
    state = FakeState(cfg.models, FakeClock(), store)
    for name, url in zip(("r1", "r2"), urls, strict=True):
        state.put_ready(name, "m", url)
    try:
        async with serving(state, store, cfg, "t") as (url, _, key):
            yield url, key, state, seen
    finally:
        for r in runners:
            await r.cleanup()
        store.close()


async def ask(url: str, key: str, system: str, user: str) -> str:
    body = {"model": "m", "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}
    async with aiohttp.ClientSession() as s, s.post(url + "/v1/chat/completions", json=body,
                                                    headers={"Authorization": f"Bearer {key}"}) as r:
        assert r.status == 200, await r.text()
        return r.headers["X-Llmgw-Route"]


async def test_a_shared_system_prompt_goes_where_it_went_before(tmp_path: Path) -> None:
    async with two_replicas(tmp_path, "prefix") as (url, key, _, seen):
        first = await ask(url, key, SYSTEM, "question one")
        assert first.startswith("LeastLoaded; replica=r1; matched=0/")
        for i in range(5):
            route = await ask(url, key, SYSTEM, f"question {i}")
            assert route.startswith("PrefixHit; replica=r1; matched=4/"), route
        other = await ask(url, key, "Another system prompt entirely. " * 40, "hello")
        assert "replica=r1" in other and other.startswith("LeastLoaded")  # idle both: the first listed
        assert seen == ["r1"] * 7


async def test_a_busy_prefix_holder_loses_to_an_idle_replica(tmp_path: Path) -> None:
    async with two_replicas(tmp_path, "prefix") as (url, key, state, seen):
        await ask(url, key, SYSTEM, "warm r1")
        state.engine_loads["r1"] = EngineLoad(running=2, waiting=3)  # its engine is busy with others' requests
        route = await ask(url, key, SYSTEM, "now")
        assert route.startswith("PrefixOverloaded; replica=r2"), route
        # both were sent the prompt now: either may take it, the less loaded does
        state.engine_loads["r1"] = EngineLoad(running=0)
        state.engine_loads["r2"] = EngineLoad(running=1)
        assert (await ask(url, key, SYSTEM, "later")).startswith("PrefixHit; replica=r1; matched=4/")
        assert seen == ["r1", "r2", "r1"]


async def test_least_loaded_spreads_concurrent_requests_whatever_their_prompt(tmp_path: Path) -> None:
    async with two_replicas(tmp_path, "least_loaded") as (url, key, state, seen):
        state.engine_loads["r1"] = EngineLoad(running=1)
        assert (await ask(url, key, SYSTEM, "q")).startswith("LeastLoaded; replica=r2; matched=0/0")
        state.engine_loads["r1"] = EngineLoad(running=0)
        routes = await asyncio.gather(*(ask(url, key, SYSTEM, f"q{i}") for i in range(4)))
        assert all(r.startswith("LeastLoaded") and r.endswith("matched=0/0") for r in routes)  # never hashed
        assert set(seen) == {"r1", "r2"}
