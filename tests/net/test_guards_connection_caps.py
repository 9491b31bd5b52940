"""The listeners' connection caps (net/listeners.py, net/guards.py): real listeners started through
start_listener on loopback, spoken to with raw sockets."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

from aiohttp import web
from bench.addresses import loopback

from llmgw.net.listeners import Limiter, refusal, start_listener
from tests.harness import await_until, free_port

VICTIM = loopback()  # a client at another address than 127.0.0.1 (bench/addresses.py)

PLAIN = refusal(b'{"error": "too many connections"}')
LONG_PATH = "/" + "a" * 7900  # an unknown path: a 404 of some 8 KB, which echoes it, to anyone, unauthenticated
TURN = 0.001  # the server answers within a turn or two of the loop: poll that often




def ok_app() -> web.Application:
    async def hello(_: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application(client_max_size=1024 * 1024)
    app.router.add_get("/", hello)
    app.router.add_post("/", hello)
    return app


@asynccontextmanager
async def listening(max_total: int, per_client: int,
                    header_timeout: float) -> AsyncIterator[tuple[Limiter, int, list[socket.socket]]]:
    """A listener on loopback: its limiter, its port, and a list for the test's client sockets, which are closed
    at the end, before the listener is (once it has seen every close)."""
    lim = Limiter("review", max_total, per_client, PLAIN)
    port = free_port()
    listener = await start_listener(ok_app(), f"127.0.0.1:{port}", lim, header_timeout)
    socks: list[socket.socket] = []
    try:
        yield lim, port, socks
    finally:
        for s in socks:
            s.close()
        await settle(lim)
        await listener.cleanup()


async def connect(port: int, local: str = "127.0.0.1", rcvbuf: int | None = None) -> socket.socket:
    s = socket.socket()
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind((local, 0))
    s.setblocking(False)
    await asyncio.get_running_loop().sock_connect(s, ("127.0.0.1", port))
    return s


async def settle(lim: Limiter) -> None:
    """Until the listener has seen every client's close (its cleanup then waits for no handler), 5 s at most:
    best effort, as a test's end may leave a close unseen."""
    with suppress(AssertionError):
        await await_until(lambda: not lim.total, 5, "every client's close seen", interval=0.02)

async def new_handler(lim: Limiter, before: set[Any]) -> Any:
    return await await_until(lambda: next((h for h in lim._counted if h not in before), None), 5, "connection counted",
                             interval=TURN)


async def response(s: socket.socket, within: float) -> bytes:
    """What the server says on `s` until it has said one whole response or closed (b"" when it said nothing)."""
    loop = asyncio.get_running_loop()
    got = b""
    try:
        async with asyncio.timeout(within):
            while True:
                chunk = await loop.sock_recv(s, 65536)
                if not chunk:
                    return got
                got += chunk
                head, sep, body = got.partition(b"\r\n\r\n")
                if sep:
                    n = next((int(h.split(b":")[1]) for h in head.split(b"\r\n")
                              if h.lower().startswith(b"content-length:")), 0)
                    if len(body) >= n:
                        return got
    except (ConnectionError, TimeoutError):
        return got


def server_side_established(port: int) -> int:
    """Sockets of the listener's (local port `port`) still ESTABLISHED: the server has not closed them."""
    n = 0
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            cols = line.split()
            if int(cols[1].split(":")[1], 16) == port and cols[3] == "01":
                n += 1
    return n


async def test_a_client_refused_at_its_own_cap_closes_no_other_clients_connection() -> None:
    """A client refused at its own per-client cap closes no other client's kept-alive connection to make room."""
    async with listening(max_total=3, per_client=2, header_timeout=30.0) as (lim, port, socks):
        loop = asyncio.get_running_loop()
        victim = await connect(port, VICTIM)
        socks.append(victim)
        await loop.sock_sendall(victim, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b" 200 " in (await response(victim, 5)).split(b"\r\n")[0]
        for _ in range(2):
            socks.append(await connect(port))
        await await_until(lambda: lim.total == 3, 5, "three connections counted", interval=TURN)
        extra = await connect(port)
        socks.append(extra)
        # (since the fix, the client at its own cap replaces its own oldest waiting connection: never more than 2)
        await await_until(lambda: lim.evicted + lim.refused >= 1, 5,
                          "the third connection refused or replacing another", interval=TURN)
        assert lim.per_client["127.0.0.1"] <= 2 and lim.per_client[VICTIM] == 1, lim.per_client
        await loop.sock_sendall(victim, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        again = await response(victim, 5)
        assert again.startswith(b"HTTP/1.1 200"), (
            f"the victim's kept-alive connection was closed for a connection that was refused anyway "
            f"({lim.evicted} evicted, {lim.refused} refused): {again[:60]!r}")


async def _stuck_idle(port: int, lim: Limiter, loop: asyncio.AbstractEventLoop) -> tuple[socket.socket, Any]:
    """A connection that asked for 404s (unauthenticated) and never reads them, left between requests with the
    last answer still in the server's write buffer (under the high-water mark, so its handler is done)."""
    before = set(lim._counted)
    s = await connect(port, rcvbuf=2048)
    h = await new_handler(lim, before)
    for sent in range(1, 5000):
        await loop.sock_sendall(s, f"GET {LONG_PATH} HTTP/1.1\r\nHost: x\r\n\r\n".encode())

        def answered(sent: int = sent) -> bool:
            return bool(h._request_count == sent and not h._request_in_progress and not h._messages)

        await await_until(answered, 5, "the 404 answered", interval=TURN)
        if h.transport is not None and h.transport.get_write_buffer_size() > 0:
            return s, h
    raise AssertionError("the server's write buffer never filled")


async def test_an_evicted_connection_that_does_not_read_is_closed_within_the_cap() -> None:
    """A connection evicted to make room, whose client never reads, is closed anyway: the cap bounds the sockets the
    listener holds."""
    async with listening(max_total=2, per_client=2, header_timeout=1.0) as (lim, port, socks):
        loop = asyncio.get_running_loop()
        for _ in range(4):
            s, h = await _stuck_idle(port, lim, loop)
            socks.append(s)

            async def evicted(h: Any = h) -> bool:  # new connections until this one is closed for them
                if h not in lim._counted:
                    return True
                socks.append(await connect(port))
                return False

            await await_until(evicted, 5, "the idle connection evicted for a new one", interval=0.01)
        await await_until(
            lambda: server_side_established(port) <= lim.max_total, 1.0 + 3.0,  # the header timeout, and a margin
            lambda: f"the listener's open sockets down to its cap of {lim.max_total}: "
                    f"{server_side_established(port)} open ({lim.total} counted, {lim.evicted} evicted)",
            interval=0.1)


async def test_clients_that_pipeline_and_never_read_do_not_lock_the_listener() -> None:
    """Clients that pipeline requests and never read the answers do not lock the operator out of a listener at its
    cap past the header timeout."""
    async with listening(max_total=2, per_client=2, header_timeout=1.0) as (lim, port, socks):
        loop = asyncio.get_running_loop()
        senders: list[asyncio.Task[None]] = []
        try:
            for _ in range(2):
                before = set(lim._counted)
                s = await connect(port, rcvbuf=2048)
                socks.append(s)
                h = await new_handler(lim, before)
                senders.append(asyncio.create_task(
                    loop.sock_sendall(s, f"GET {LONG_PATH} HTTP/1.1\r\nHost: x\r\n\r\n".encode() * 2000)))

                def blocked(h: Any = h) -> bool:
                    return bool(h._request_in_progress and h.transport is not None
                                and h.transport.get_write_buffer_size() > 64 * 1024)

                await await_until(blocked, 10, "blocked writing", interval=TURN)
            answers = [b""]

            async def operator_served() -> bool:
                op = await connect(port)
                socks.append(op)
                await loop.sock_sendall(op, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                answers.append(await response(op, 2))
                return answers[-1].startswith(b"HTTP/1.1 200")

            await await_until(operator_served, 1.0 + 3.0,
                              lambda: f"the operator served; still refused: {answers[-1][:40]!r}", interval=0.2)
        finally:
            for t in senders:
                t.cancel()


async def test_a_request_that_has_arrived_is_not_dropped_for_a_new_connection() -> None:
    """A kept-alive connection whose next request has arrived is not closed to make room for a new connection."""
    async with listening(max_total=2, per_client=2, header_timeout=30.0) as (lim, port, socks):
        loop = asyncio.get_running_loop()
        victim = await connect(port)
        socks.append(victim)
        await loop.sock_sendall(victim, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        assert (await response(victim, 5)).startswith(b"HTTP/1.1 200")
        socks.append(await connect(port))
        await await_until(lambda: lim.total == 2, 5, "at the cap", interval=TURN)
        # no turn of the loop between these two: both are there when it next looks
        newcomer = socket.create_connection(("127.0.0.1", port))
        socks.append(newcomer)
        victim.setblocking(True)
        victim.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        victim.setblocking(False)
        got = await response(victim, 5)
        assert got.startswith(b"HTTP/1.1 200"), f"a request that had arrived was dropped: {got[:40]!r}"


async def test_expect_100_continue_over_the_limit_is_refused_413_before_the_body() -> None:
    """A body announced over the limit with `Expect: 100-continue` is answered 413, not invited with `100 Continue`."""
    async with listening(max_total=8, per_client=8, header_timeout=30.0) as (_, port, socks):
        loop = asyncio.get_running_loop()
        s = await connect(port)
        socks.append(s)
        await loop.sock_sendall(s, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 50000000\r\n"
                                   b"Expect: 100-continue\r\n\r\n")
        first = await response(s, 5)
        assert first.startswith(b"HTTP/1.1 413"), f"the first answer: {first[:40]!r}"
