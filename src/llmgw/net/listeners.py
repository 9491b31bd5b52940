"""Listeners that an unauthenticated client cannot exhaust.

Each listener has its own cap on open connections and, per client address, a smaller one; a connection beyond
either is answered 503 and closed at once, so one noisy client (or one listener under attack) cannot take the file
descriptors the others need; at the listener's cap, a connection that only waits is closed to make room first, and
failing that the slowest upload. An IPv6 client is its /64. Header lines are bounded in size and count, a request's
headers in all by net/header_budget.py, connections still in their TLS handshake by net/handshakes.py, and
headers (with a TLS handshake before them) must arrive within `header_timeout`
of the connection opening or of the previous response (aiohttp's keep-alive timer does both), so slow or silent
connections are closed instead of being kept for an hour; bodies are bounded by net/guards.py. The open-file
limit is raised to its hard limit at start, and the caps are fitted under it. Repeated errors from the event loop
(a refused accept, say) are logged once a minute with a count, not once per occurrence.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import resource
import ssl
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from llmgw.config.types import split_listen
from llmgw.net.guards import OncePerKind, Uploads, connection_logger, expect_within_limits, request_bounds
from llmgw.net.handshakes import Handshakes, handshake_cap
from llmgw.net.header_budget import HeaderBudget

log = logging.getLogger(__name__)

MAX_LINE = 8190  # request line and each header line
MAX_HEADERS = 64
FD_RESERVE = 256  # for the store, engines' probes, logs and outgoing connections


@dataclass
class Limiter:
    """Counts a listener's connections and refuses those beyond its caps."""

    name: str
    max_total: int
    max_per_client: int
    refusal: bytes
    total: int = 0
    refused: int = 0
    evicted: int = 0
    stalled: int = 0
    per_client: Counter[str] = field(default_factory=Counter)
    _counted: dict[Any, str] = field(default_factory=dict)  # aiohttp's RequestHandler -> its client
    _quiet_until: float = 0.0
    _unsent: dict[Any, int] = field(default_factory=dict)  # bytes each connection had left to send at the last sweep
    # who a connection belongs to: its address (an IPv6 one's /64) by default; on the agent listener the
    # certificate's node
    client_of: Callable[[asyncio.Transport], str] = field(default=lambda t: peer_address(t))
    uploads: Uploads = field(default_factory=Uploads)  # the bodies being received, which start_listener fills

    def install(self, server: web.Server) -> None:
        made, lost = server.connection_made, server.connection_lost

        def connection_made(handler: Any, transport: asyncio.Transport) -> None:
            made(handler, transport)
            client = self.client_of(transport)
            if self.per_client[client] >= self.max_per_client:
                self._make_room(client)  # a client at its own cap replaces its own waiting connection, no other's
            elif self.total >= self.max_total:
                self._make_room(None)
            if self.total >= self.max_total or self.per_client[client] >= self.max_per_client:
                self.refused += 1
                self._say(client, "refusing connections")
                transport.write(self.refusal)
                # closed on the loop's next turn, once aiohttp has started the connection's task: closed now, the
                # task would start on a connection already torn down
                asyncio.get_running_loop().call_soon(transport.close)
                return
            self.total += 1
            self.per_client[client] += 1
            self._counted[handler] = client

        def connection_lost(handler: Any, exc: BaseException | None = None) -> None:
            self._uncount(handler)
            lost(handler, exc)

        server.connection_made = connection_made  # type: ignore[method-assign]
        server.connection_lost = connection_lost  # type: ignore[method-assign]

    def _uncount(self, handler: object) -> None:
        client = self._counted.pop(handler, None)
        if client is not None:
            self.total -= 1
            self.per_client[client] -= 1
            if self.per_client[client] <= 0:
                del self.per_client[client]

    def _make_room(self, only: str | None) -> None:
        """At a cap, the connection open longest that only waits for its next request (idle, or its headers not
        all in) is closed for the new one, as nginx reuses idle keep-alive connections: waiting connections cannot
        keep a listener from its next client, though on loopback every client has one address. Failing that, the
        one whose request body arrives most slowly (a body trickled in must not hold a place a byte a second).
        `only`: among that client's connections. One whose request has arrived, or is being answered, is never
        closed."""
        for handler, client in self._counted.items():
            if (only is None or client == only) and _waiting(handler):
                self._close(handler, client, "closing waiting connections for new ones")
                self.evicted += 1
                return
        mine = (lambda h: self._counted.get(h) == only) if only is not None else (lambda h: h in self._counted)
        slow = self.uploads.slowest(mine, asyncio.get_running_loop().time())
        if slow is not None:
            self._close(slow, self._counted[slow], "closing the slowest uploads for new connections")
            self.evicted += 1

    def _close(self, handler: Any, client: str, why: str) -> None:
        """Closed at once, whatever it has left to send: counted until its socket is gone, which is now."""
        self._uncount(handler)
        self._say(client, why)
        transport = handler.transport
        if transport is not None:
            transport.abort()
        handler.force_close()

    def sweep(self) -> None:
        """Called every header timeout: a connection whose answer has not moved since the last sweep (its client
        reads none of it, as a slow reader of a pipelined flood does) is closed. aiohttp has no write timeout, and
        such a connection, mid-request, is never one that waits."""
        unsent: dict[Any, int] = {}
        for handler, client in list(self._counted.items()):
            transport = handler.transport
            size = transport.get_write_buffer_size() if transport is not None else 0
            if size and self._unsent.get(handler) == size:
                self.stalled += 1
                self._close(handler, client, "closing connections whose client reads nothing of its answer")
            elif size:
                unsent[handler] = size
        self._unsent = unsent

    def _say(self, client: str, what: str) -> None:
        now = asyncio.get_running_loop().time()
        if now >= self._quiet_until:
            self._quiet_until = now + 60.0
            log.warning(
                "%s listener: %s (at %d of %d open, %d from %s, cap %d per client); so far %d refused, %d waiting "
                "connections closed for new ones, %d closed for reading nothing; next report in a minute",
                self.name, what, self.total, self.max_total, self.per_client[client], client, self.max_per_client,
                self.refused, self.evicted, self.stalled,
            )


def _waiting(handler: Any) -> bool:
    """Whether an aiohttp RequestHandler waits for a request none of which has arrived: its waiter pending and
    nothing parsed queued (while a request is answered the waiter is None)."""
    waiter = getattr(handler, "_waiter", None)
    return waiter is not None and not waiter.done() and not getattr(handler, "_messages", True)


def peer_address(transport: asyncio.Transport) -> str:
    peer = transport.get_extra_info("peername")
    return client_of_address(str(peer[0])) if peer else "?"


def client_of_address(address: str) -> str:
    """Who an address counts as: an IPv4 address itself; an IPv6 one its /64, which one host is commonly given
    whole (so it cannot take a fresh address for each connection)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def peer_node(transport: asyncio.Transport) -> str:
    """The node a mutual-TLS connection speaks for (its certificate's CN), else its address."""
    from llmgw.pki.tls import peer_node_id

    node = peer_node_id(transport.get_extra_info("peercert"))
    return f"node:{node}" if node else peer_address(transport)


def refusal(body: bytes) -> bytes:
    return (
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


def runner_options(header_timeout: float, name: str) -> dict[str, Any]:
    return {
        "access_log": None,
        "logger": connection_logger(name),
        "keepalive_timeout": header_timeout,
        "max_line_size": MAX_LINE,
        "max_field_size": MAX_LINE,
        "max_headers": MAX_HEADERS,
        # an answer given before the body is read (a refusal) ends the connection at once: aiohttp would go on
        # reading what is left of the body for 10 s, the connection counted against the caps meanwhile
        "lingering_time": 0,
        # request bodies are taken as sent: aiohttp would inflate a compressed one as it arrives, before any
        # handler could refuse it (a few KB of gzip to megabytes, per connection); guards.py refuses them (415)
        "auto_decompress": False,
    }


def raise_fd_limit() -> int:
    """Raise the soft open-file limit to the hard one; return what is now available."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as e:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, hard, e)
    return int(min(soft, 1 << 20))


def fit(caps: dict[str, int], fds: int) -> dict[str, int]:
    """Scale the listeners' caps down so that all of them together fit under `fds` less a reserve."""
    room = max(fds - FD_RESERVE, len(caps) * 8)
    want = sum(caps.values())
    if want <= room:
        return caps
    scaled = {k: max(8, v * room // want) for k, v in caps.items()}
    log.warning(
        "open-file limit %d is too low for the configured connection caps (%s): using %s; raise LimitNOFILE",
        fds, caps, scaled,
    )
    return scaled


def per_client(configured: int, cap: int) -> int:
    """One client never holds more than a quarter of a listener, however its caps were fitted."""
    return max(1, min(configured, cap // 4))


class QuietErrors:
    """An event-loop exception handler that logs each kind of error at most once a minute, with a count."""

    def __init__(self, loop: asyncio.AbstractEventLoop, every: float = 60.0) -> None:
        self.loop = loop
        self.quiet = OncePerKind(every)

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        what = str(context.get("message", "error"))
        exc = context.get("exception")
        kind = f"{what}: {type(exc).__name__}" if exc is not None else what
        n = self.quiet.due(kind, loop.time())
        if not n:
            return
        log.error("%s (%d time(s) in the last minute)%s", kind, n, f": {exc}" if exc is not None else "")


class Listener:
    def __init__(self, runner: web.AppRunner, limiter: Limiter, every: float, server: asyncio.AbstractServer) -> None:
        self.runner = runner
        self.server = server
        self.sweeper = asyncio.create_task(self._sweep(limiter, every))

    @staticmethod
    async def _sweep(limiter: Limiter, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            limiter.sweep()

    async def cleanup(self) -> None:
        self.sweeper.cancel()
        self.server.close()
        await self.runner.cleanup()


async def start_listener(
    app: web.Application,
    listen: str,
    limiter: Limiter,
    header_timeout: float,
    tls: ssl.SSLContext | None = None,
    reuse_port: bool = False,
) -> Listener:
    app.middlewares.append(request_bounds(header_timeout, limiter.uploads))
    for route in app.router.routes():  # aiohttp answers "100 Continue" before any middleware runs
        route._expect_handler = expect_within_limits
    runner = web.AppRunner(app, **runner_options(header_timeout, limiter.name))
    await runner.setup()
    web_server = runner.server
    assert web_server is not None
    limiter.install(web_server)
    host, port = split_listen(listen)
    loop = asyncio.get_running_loop()

    def connection() -> asyncio.Protocol:  # aiohttp's handler, each request's headers held to a budget
        return HeaderBudget(web_server())

    if tls is None:
        server = await loop.create_server(connection, host, port, reuse_address=True, reuse_port=reuse_port,
                                          backlog=128)
        return Listener(runner, limiter, header_timeout, server)
    # the limiter sees a connection only once its TLS handshake is done: until then it is counted by Handshakes,
    # and must finish it within the header timeout
    handshakes = Handshakes(limiter.name, handshake_cap(limiter.max_total))
    server = await loop.create_server(handshakes.factory(connection, tls, header_timeout), host, port,
                                      reuse_address=True, backlog=128)
    return Listener(runner, limiter, header_timeout, server)
