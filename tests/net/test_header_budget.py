"""Each request's line and headers together may take HEADER_BUDGET bytes (net/header_budget.py), on a real
listener on loopback: past it, 431 and the connection closed; within it, however the bytes arrive, and whatever
body follows them in the same packets, the request is served; each request on a kept-alive connection has a whole
budget of its own."""

from __future__ import annotations

import asyncio

from llmgw.net.header_budget import HEADER_BUDGET
from tests.harness import await_until
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


async def test_headers_trickled_over_the_budget_are_counted_across_reads() -> None:
    """Each piece far under the budget, read by the server one by one (its receive queue seen empty before the next
    is sent), together over it: refused as one request's headers. A budget counting each read alone (both tests
    above may arrive in one read) would take them all."""
    from tests.integration.test_header_memory import server_side

    async with listening(max_total=8, per_client=8, header_timeout=30.0) as (_, port, socks):
        loop = asyncio.get_running_loop()
        s = await connect(port)
        socks.append(s)
        whole = head("GET", HEADER_BUDGET + 8000)
        sent = 0
        for i in range(0, len(whole), 2000):
            try:
                await loop.sock_sendall(s, whole[i:i + 2000])
            except OSError:  # closed by the server for the headers' size
                break
            sent = i + 2000

            async def read_by_server() -> bool:
                return server_side(port)[1] == 0

            await await_until(read_by_server, 10, "the server reading the piece")
        answer = await response(s, 5)
        assert answer.startswith(b"HTTP/1.1 431"), (answer[:60], sent)
        # refused once the budget was passed, not before (the piece after it may still be taken by the kernel)
        assert HEADER_BUDGET <= sent <= HEADER_BUDGET + 4000, sent
