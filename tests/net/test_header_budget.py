"""Each request's line and headers together may take HEADER_BUDGET bytes (net/header_budget.py), on a real
listener on loopback: past it, 431 and the connection closed; within it, however the bytes arrive, and whatever
body follows them in the same packets, the request is served; each request on a kept-alive connection has a whole
budget of its own."""

from __future__ import annotations

import asyncio

from llmgw.net.header_budget import HEADER_BUDGET
from tests.net.test_guards_connection_caps import connect, listening, response


def head(method: str, pad: int, extra: str = "") -> bytes:
    """A request whose headers take about `pad` bytes, in lines of at most 8,000."""
    lines = "".join(f"X-Pad-{i}: {'a' * min(8000, pad - i * 8000)}\r\n" for i in range((pad + 7999) // 8000))
    return f"{method} / HTTP/1.1\r\nHost: x\r\n{lines}{extra}\r\n".encode()


async def test_headers_over_the_budget_are_refused_431_and_closed() -> None:
    async with listening(max_total=8, per_client=8, header_timeout=30.0) as (_, port, socks):
        s = await connect(port)
        socks.append(s)
        await asyncio.get_running_loop().sock_sendall(s, head("GET", HEADER_BUDGET + 8000))
        answer = await response(s, 5)
        assert answer.startswith(b"HTTP/1.1 431"), answer[:60]
        assert await asyncio.get_running_loop().sock_recv(s, 10) == b""


async def test_headers_within_the_budget_are_served_however_they_arrive() -> None:
    async with listening(max_total=8, per_client=8, header_timeout=30.0) as (_, port, socks):
        loop = asyncio.get_running_loop()
        s = await connect(port)
        socks.append(s)
        whole = head("GET", HEADER_BUDGET - 4096)
        for i in range(0, len(whole), 1000):  # in many small pieces
            await loop.sock_sendall(s, whole[i:i + 1000])
        assert (await response(s, 5)).startswith(b"HTTP/1.1 200")
        for _ in range(3):  # again on the same connection: each request has its own budget
            await loop.sock_sendall(s, head("GET", HEADER_BUDGET - 4096))
            assert (await response(s, 5)).startswith(b"HTTP/1.1 200")


async def test_a_body_sent_with_its_headers_is_not_counted_against_them() -> None:
    async with listening(max_total=8, per_client=8, header_timeout=30.0) as (_, port, socks):
        s = await connect(port)
        socks.append(s)
        body = b"{}" + b" " * 500_000
        await asyncio.get_running_loop().sock_sendall(
            s, head("POST", 16000, f"Content-Length: {len(body)}\r\n") + body)
        assert (await response(s, 5)).startswith(b"HTTP/1.1 200")
