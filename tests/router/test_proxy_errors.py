"""The forwarding boundary speaks llmgw's exceptions: ConnectFailed when the engine never had the request (the
router tries another replica), StreamBroken when it had it and then failed (never retried)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp.test_utils import make_mocked_request

from llmgw.core.errors import ConnectFailed, StreamBroken
from llmgw.router.proxy import Attempt, Timeouts, forward
from llmgw.router.usage import StreamUsage
from tests.harness import free_port

T = Timeouts(connect=2.0, first_byte=0.5, between_chunks=0.5)
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _engine(handler: Handler) -> AsyncIterator[str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1/chat/completions"
    finally:
        server.close()
        await server.wait_closed()


class _Present:
    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: object = None) -> object:
        return default


async def _send(url: str) -> None:
    async with aiohttp.ClientSession() as s:
        # a client still there: forward gives a whole answer up when its client's connection is closing
        request = make_mocked_request("POST", "/v1/chat/completions", transport=_Present())
        await forward(Attempt(request, s, url, b"{}", False, T, StreamUsage(strip=False)))


async def test_nobody_listening_is_connect_failed() -> None:
    with pytest.raises(ConnectFailed):
        await _send(f"http://127.0.0.1:{free_port()}/v1/chat/completions")


async def test_an_engine_that_takes_the_request_and_hangs_up_is_a_broken_exchange() -> None:
    async def hang_up(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await r.readuntil(b"\r\n\r\n")
        w.close()

    async for url in _engine(hang_up):
        with pytest.raises(StreamBroken) as e:
            await _send(url)
        assert e.value.status == 502 and e.value.answered is None


async def test_an_engine_that_takes_the_request_and_says_nothing_is_a_timeout_not_a_retry() -> None:
    done = asyncio.Event()

    async def silent(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await r.readuntil(b"\r\n\r\n")
        await done.wait()
        w.close()

    async for url in _engine(silent):
        with pytest.raises(StreamBroken) as e:
            await _send(url)
        done.set()
        assert e.value.status == 504
