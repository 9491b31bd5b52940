"""What the router relays from an engine is bounded: an answer over MAX_RESPONSE_BYTES, announced or not, is a 502
and none of it reaches the client; one just under the bound is relayed whole."""

from __future__ import annotations

from pathlib import Path

import aiohttp
from aiohttp import web

from llmgw.router.proxy import MAX_RESPONSE_BYTES
from tests.router.conftest import router_over

CHUNK = b" " * (1 << 20)


def engine(size: int, announced: bool) -> web.Application:
    """An engine whose chat answer is `size` bytes of JSON (whitespace, then an object), with its length announced
    in Content-Length or sent chunked without one."""
    tail = b'{"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}'

    async def chat(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        if announced:
            resp.content_length = size
        await resp.prepare(request)
        left = size - len(tail)
        try:
            while left > 0:
                await resp.write(CHUNK[:min(left, len(CHUNK))])
                left -= len(CHUNK)
            await resp.write(tail)
            await resp.write_eof()
        except ConnectionError:
            pass  # the router stopped reading: what it should do
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def ask(tmp_path: Path, size: int, announced: bool) -> tuple[int, bytes]:
    async with router_over(tmp_path, engine(size, announced)) as b, aiohttp.ClientSession() as s, s.post(
        b.url + "/v1/chat/completions", json={"model": "sim-a", "messages": [{"role": "user", "content": "hi"}]},
        headers={"Authorization": f"Bearer {b.key}"},
    ) as r:
        return r.status, await r.read()


async def test_an_answer_announced_over_the_bound_is_refused_unread(tmp_path: Path) -> None:
    status, body = await ask(tmp_path, MAX_RESPONSE_BYTES + 1, announced=True)
    assert status == 502 and len(body) < 4096 and b"over" in body, (status, body[:300])


async def test_an_answer_growing_over_the_bound_unannounced_is_refused(tmp_path: Path) -> None:
    status, body = await ask(tmp_path, MAX_RESPONSE_BYTES + 1, announced=False)
    assert status == 502 and len(body) < 4096 and b"over" in body, (status, body[:300])


async def test_an_answer_at_the_bound_is_relayed_whole(tmp_path: Path) -> None:
    status, body = await ask(tmp_path, MAX_RESPONSE_BYTES, announced=False)
    assert status == 200 and len(body) == MAX_RESPONSE_BYTES, (status, len(body))
