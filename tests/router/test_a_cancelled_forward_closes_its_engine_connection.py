"""When the router's own wait for a whole answer is cancelled (its handler cancelled as the server stops, or any
caller's deadline), the exchange with the engine is cancelled with it, and its connection to the engine closes, so
the engine hears that nobody waits. Before, `forward` ran the exchange as a task of its own and only cancelled it when
it saw the client leave: cancelling `forward` left that task reading the engine's answer for nobody, to the end."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from unittest.mock import MagicMock

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from llmgw.router.proxy import Attempt, Timeouts, forward
from tests.harness import await_until


class SlowEngine:
    """Holds each request for 30 s of "generating", noting when it had one and when its connection closed."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.closed = asyncio.Event()

    async def chat(self, request: web.Request) -> web.Response:
        await request.read()
        self.started.set()
        for _ in range(300):
            await asyncio.sleep(0.05)
            if request.transport is None or request.transport.is_closing():
                self.closed.set()
                return web.Response(status=499)
        return web.json_response({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}})


@contextlib.asynccontextmanager
async def engine_on_loopback(engine: SlowEngine) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", engine.chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/v1/chat/completions"
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("stream", [False, True])
async def test_cancelling_forward_closes_the_engine_connection(stream: bool) -> None:
    engine = SlowEngine()
    transport = MagicMock()
    transport.is_closing.return_value = False  # the client stays: only the router's own wait is cancelled
    client_request = make_mocked_request("POST", "/v1/chat/completions", transport=transport)
    async with engine_on_loopback(engine) as url, aiohttp.ClientSession() as session:
        attempt = Attempt(request=client_request, session=session, url=url, body=b"{}", stream=stream,
                          timeouts=Timeouts(connect=5, first_byte=60, between_chunks=60))
        task = asyncio.ensure_future(forward(attempt))
        await asyncio.wait_for(engine.started.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await await_until(lambda: asyncio.sleep(0, engine.closed.is_set()), 5,
                          "the engine's connection closed when the router stopped waiting for its answer")
