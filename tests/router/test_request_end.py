"""A request ends in one stage (router/ending.py), called once whatever way it ended: answered, the engine failed,
the engine said nothing in time, the client went away mid-stream, no replica could be reached. What reached an
engine is recorded once; what reached none is not recorded."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from llmgw.config.server import RouterConfig
from llmgw.router.context import RequestContext
from llmgw.router.proxy import CLIENT_CLOSED
from llmgw.router.stats import Measure
from tests.harness import await_until, free_port
from tests.router.conftest import Bench, router_over

TOKEN = b'data: {"choices": [{"index": 0, "delta": {"content": "x"}}]}\n\n'


def engine(never: asyncio.Event) -> web.Application:
    """Does what the request's one message says: answer, fail, stay silent, or stream tokens until nobody reads."""

    async def chat(request: web.Request) -> web.StreamResponse:
        say = (await request.json())["messages"][0]["content"]
        if say == "fail":
            return web.json_response({"error": {"message": "out of memory"}}, status=500)
        if say == "silent":
            await never.wait()  # until the test ends
            return web.json_response({})
        if say == "stream":
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            while not never.is_set():  # a long generation, until the router hangs up (or the test ends)
                try:
                    await resp.write(TOKEN)
                except ConnectionError:
                    break
                await asyncio.sleep(0.02)
            return resp
        return web.json_response({"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 3}})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


@pytest.fixture
async def bench(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[Bench, list[int]]]:
    """The router over `engine` for sim-a, and over a replica nobody listens at for sim-b; and the statuses its end
    stage was called with, one per call."""
    never = asyncio.Event()
    timeouts = RouterConfig(first_byte_timeout=0.5, between_chunks_timeout=30)
    async with router_over(tmp_path, engine(never), timeouts) as b:
        b.state.put_ready("sim-b-dead", "sim-b", f"http://127.0.0.1:{free_port()}")
        ends: list[int] = []
        real = b.router.ending.end

        def counted(m: Measure, ctx: RequestContext | None, status: int) -> None:
            ends.append(status)
            real(m, ctx, status)

        monkeypatch.setattr(b.router.ending, "end", counted)
        yield b, ends
        never.set()


async def post(b: Bench, say: str, model: str = "sim-a") -> int:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": say}]}
    async with aiohttp.ClientSession() as s, s.post(b.url + "/v1/chat/completions", json=body,
                                                    headers={"Authorization": f"Bearer {b.key}"}) as r:
        await r.read()
        return r.status


async def leave_mid_stream(b: Bench) -> None:
    """A raw client: a streamed request, read until its first token, then the connection dropped."""
    reader, writer = await asyncio.open_connection(*b.url.removeprefix("http://").split(":"))
    body = json.dumps({"model": "sim-a", "stream": True, "messages": [{"role": "user", "content": "stream"}]}).encode()
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 + f"Authorization: Bearer {b.key}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    seen = b""
    while b'"content": "x"' not in seen:
        chunk = await asyncio.wait_for(reader.read(4096), 10)
        assert chunk, seen
        seen += chunk
    writer.transport.abort()


@pytest.mark.parametrize(("way", "answered", "journaled"), [
    ("answered", 200, 200),
    ("engine error", 500, 500),
    ("timeout", 504, 504),
    ("client gone", None, CLIENT_CLOSED),
    ("retry exhausted", 503, None),  # it reached no engine: nothing to record
])
async def test_each_way_a_request_ends_passes_the_end_stage_once(bench: tuple[Bench, list[int]], way: str,
                                                                  answered: int | None, journaled: int | None) -> None:
    b, ends = bench
    if answered is None:
        await leave_mid_stream(b)
        await await_until(lambda: ends, 10, "the request that lost its client ended")
    else:
        say = {"engine error": "fail", "timeout": "silent"}.get(way, "hi")
        assert await post(b, say, "sim-b" if way == "retry exhausted" else "sim-a") == answered
    assert len(ends) == 1, ends
    journal = b.router.usage_journal
    assert not journal.inflight
    assert [r.status for r in journal.pending] == ([journaled] if journaled is not None else [])
    stats = b.router.recorder.snapshot()
    counted = {m: t.requests for m, t in stats.models.items()}
    assert counted == {"sim-b" if way == "retry exhausted" else "sim-a": {str(journaled or answered): 1}}
    assert stats.in_flight == []
