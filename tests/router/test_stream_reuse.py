"""llama-server closes its connection after a streamed answer without saying so (no `Connection: close`): a
request the router then sent on that kept-alive connection failed ("Can not write request body") and was not
retried, since the engine may have had it. Seen as a rare 502 in CI; every time here with two streams in a row."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from tests.router.conftest import RouterUnderTest

pytestmark = pytest.mark.usefixtures("llama")


async def test_streams_in_a_row_to_a_real_llama_server_all_succeed(rut: RouterUnderTest) -> None:
    """Two clients, each sending streams back to back: a request often finds the connection a stream just ended on
    back in the router's pool before the engine's close has been read."""
    body = {"model": "smollm2", "stream": True, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    statuses: list[tuple[int, bool]] = []

    async def client() -> None:
        async with aiohttp.ClientSession() as s:
            for _ in range(6):
                async with s.post(rut.url + "/v1/chat/completions", json=body,
                                  headers={"Authorization": f"Bearer {rut.key}"}) as r:
                    data = await r.read()
                    statuses.append((r.status, b"data: [DONE]" in data))
                    if r.status != 200:
                        errors.append(data.decode(errors="replace")[:300])

    errors: list[str] = []
    await asyncio.gather(client(), client())
    assert statuses == [(200, True)] * 12, errors
