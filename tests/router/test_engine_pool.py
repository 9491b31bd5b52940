"""The router holds a bounded pool of connections per replica; requests beyond it wait their turn in the router."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
from aiohttp import web

from llmgw.config.server import RouterConfig, ServerConfig, TLSFiles
from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.router.app import Router
from llmgw.router.keys import KeyRing, new_key
from llmgw.router.state import LocalState
from llmgw.store.sqlite import SqliteStore
from tests.harness import free_port
from tests.router.conftest import models, ready_replica


class CountingEngine:
    """Stands in for an engine whose every answer takes a while, and counts how many it is asked at once."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0
        self.peers: set[tuple[str, int]] = set()

    async def chat(self, request: web.Request) -> web.Response:
        self.now += 1
        self.most = max(self.most, self.now)
        self.peers.add(request.transport.get_extra_info("peername"))  # type: ignore[union-attr]
        try:
            await asyncio.sleep(0.2)
        finally:
            self.now -= 1
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        return web.json_response({"id": "x", "object": "chat.completion", "choices": [], "usage": usage})


async def test_requests_beyond_the_pool_queue_and_all_complete(tmp_path: Path) -> None:
    engine = CountingEngine()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", engine.chat)
    eng_runner = web.AppRunner(app)
    await eng_runner.setup()
    eng_port = free_port()
    await web.TCPSite(eng_runner, "127.0.0.1", eng_port).start()

    cfg = ServerConfig(tls=TLSFiles(ca="x", cert="x", key="x"), models=models(),
                       router=RouterConfig(connections_per_replica=2, queue_timeout=30.0))
    store = SqliteStore(tmp_path / "llmgw.db").open()
    clock = FakeClock()
    plane = ControlPlane(cfg, store, clock)
    plane.load()
    ready_replica(plane, "sim-a-1", "sim-a", f"http://127.0.0.1:{eng_port}")
    keys = KeyRing(store)
    raw, rec = new_key("t", [], clock)
    store.put_key(rec)
    router = Router(LocalState(plane), keys, cfg.router, cfg.load_wait, cfg.max_body)
    runner = web.AppRunner(router.app())
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        body = json.dumps({"model": "sim-a", "messages": [{"role": "user", "content": "hi"}]})
        headers = {"Authorization": f"Bearer {raw}", "Content-Type": "application/json"}
        async with aiohttp.ClientSession() as s:

            async def one() -> int:
                async with s.post(f"http://127.0.0.1:{port}/v1/chat/completions", data=body, headers=headers) as r:
                    return r.status

            statuses = await asyncio.gather(*(one() for _ in range(8)))
        assert statuses == [200] * 8
        assert engine.most == 2 and len(engine.peers) <= 2, (engine.most, engine.peers)
    finally:
        await runner.cleanup()
        await router.close()
        await eng_runner.cleanup()
        store.close()
