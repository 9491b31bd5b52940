"""The router holds a bounded pool of connections per replica; requests beyond it wait their turn in the router."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
from aiohttp import web

from llmgw.config.server import RouterConfig
from tests.router.conftest import router_over


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
    async with router_over(tmp_path, app, RouterConfig(connections_per_replica=2, queue_timeout=30.0)) as b:
        body = json.dumps({"model": "sim-a", "messages": [{"role": "user", "content": "hi"}]})
        headers = {"Authorization": f"Bearer {b.key}", "Content-Type": "application/json"}
        async with aiohttp.ClientSession() as s:

            async def one() -> int:
                async with s.post(f"{b.url}/v1/chat/completions", data=body, headers=headers) as r:
                    return r.status

            statuses = await asyncio.gather(*(one() for _ in range(8)))
    assert statuses == [200] * 8
    assert engine.most == 2 and len(engine.peers) <= 2, (engine.most, engine.peers)
