"""A client that closes a stream (at [DONE], as the official clients do, or half-way) is expected, not an error:
the request is recorded once, with what was seen, and nothing is logged as a failure."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest
from aiohttp import web

from tests.harness import await_until, failures_logged
from tests.router.conftest import Bench, router_over

engine_saw_hangup: list[int] = []


def engine(pause_after_done: float, tokens: int, gap: float) -> web.Application:
    async def chat(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(tokens):
            chunk = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": f"{i}"}}]}
            try:
                await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            except ConnectionError:
                engine_saw_hangup.append(i)  # the router hung up for the client that walked away: stop
                return resp
            await asyncio.sleep(gap)
        usage = {"id": "x", "object": "chat.completion.chunk", "choices": [],
                 "usage": {"prompt_tokens": 5, "completion_tokens": tokens, "total_tokens": 5 + tokens}}
        await resp.write(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")
        await asyncio.sleep(pause_after_done)  # the client has everything it wants, and hangs up meanwhile
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def read_until(b: Bench, stop_at: bytes) -> bytes:
    """A raw client: send a streamed request, read until `stop_at`, then close the connection at once."""
    reader, writer = await asyncio.open_connection(*b.url.removeprefix("http://").split(":"))
    body = json.dumps({"model": "sim-a", "stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode()
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 + f"Authorization: Bearer {b.key}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    seen = b""
    while stop_at not in seen:
        chunk = await asyncio.wait_for(reader.read(4096), 10)
        assert chunk, seen
        seen += chunk
    writer.transport.abort()
    return seen


async def recorded(b: Bench, n: int) -> list[tuple[int, int, int]]:
    async def done() -> bool:
        return not b.router.usage_journal.inflight

    await await_until(done, 10, "every request finished in the router")
    assert await b.router.usage_journal.flush()
    rows = b.store.db.execute("SELECT status, prompt_tokens, completion_tokens FROM usage ORDER BY seq").fetchall()
    assert len(rows) == n, rows
    return [(int(s), int(p), int(c)) for s, p, c in rows]


async def test_a_client_closing_at_done_is_recorded_with_its_tokens(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with router_over(tmp_path, engine(pause_after_done=0.3, tokens=3, gap=0.0)) as b:
        for _ in range(5):
            await read_until(b, b"data: [DONE]")
        rows = await recorded(b, 5)
    assert rows == [(200, 5, 3)] * 5  # the client had the whole answer: a success, whoever hung up first
    assert failures_logged(caplog) == []


async def test_a_stream_abandoned_half_way_is_recorded_once_with_what_was_seen(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with router_over(tmp_path, engine(pause_after_done=0.0, tokens=50, gap=0.05)) as b:
        await read_until(b, b'"content": "2"')
        rows = await recorded(b, 1)
        # the engine notices the hang-up when it next writes
        await await_until(lambda: engine_saw_hangup, 5, "the engine told of the hang-up: it would generate for nobody")
    status, _, completion = rows[0]
    assert status == 499 and 3 <= completion < 50
    assert engine_saw_hangup, "the engine was not told: it would generate for nobody"
    assert failures_logged(caplog) == []
