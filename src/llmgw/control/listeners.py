"""Listeners that an unauthenticated client cannot exhaust.

Each listener has its own cap on open connections and, per client address, a smaller one; a connection beyond
either is answered 503 and closed at once, so one noisy client (or one listener under attack) cannot take the file
descriptors the others need; at the listener's cap, a connection that only waits is closed to make room first.
Headers are bounded in size and count, and (with a TLS handshake before them) must arrive within `header_timeout`
of the connection opening or of the previous response (aiohttp's keep-alive timer does both), so slow or silent
connections are closed instead of being kept for an hour; bodies are bounded by control/guards.py. The open-file
limit is raised to its hard limit at start, and the caps are fitted under it. Repeated errors from the event loop
(a refused accept, say) are logged once a minute with a count, not once per occurrence.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import ssl
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from llmgw.config.types import split_listen
from llmgw.control.guards import connection_logger, request_bounds

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
    per_client: Counter[str] = field(default_factory=Counter)
    _counted: dict[Any, str] = field(default_factory=dict)  # aiohttp's RequestHandler -> its client
    _quiet_until: float = 0.0
    # who a connection belongs to: its address by default; on the agent listener the certificate's node
    client_of: Callable[[asyncio.Transport], str] = field(default=lambda t: peer_address(t))

    def install(self, server: web.Server) -> None:
        made, lost = server.connection_made, server.connection_lost

        def connection_made(handler: Any, transport: asyncio.Transport) -> None:
            made(handler, transport)
            client = self.client_of(transport)
            if self.total >= self.max_total:
                self._make_room()
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

    def _make_room(self) -> None:
        """At the cap, the connection open longest with no request in progress is closed for the new one, as
        nginx reuses idle keep-alive connections: connections that only wait (idle, or never finishing their
        headers) cannot keep a listener from its next client, though on loopback every client has one address.
        One with a request being served is never closed."""
        for handler, client in self._counted.items():
            if not getattr(handler, "_request_in_progress", True):  # aiohttp's RequestHandler, between requests
                self._uncount(handler)
                self.evicted += 1
                self._say(client, "closing waiting connections for new ones")
                handler.force_close()
                return

    def _say(self, client: str, what: str) -> None:
        now = asyncio.get_running_loop().time()
        if now >= self._quiet_until:
            self._quiet_until = now + 60.0
            log.warning(
                "%s listener: %s (at %d of %d open, %d from %s, cap %d per client); "
                "%d refused and %d waiting connections closed for new ones so far, next report in a minute",
                self.name, what, self.total, self.max_total, self.per_client[client], client, self.max_per_client,
                self.refused, self.evicted,
            )


def peer_address(transport: asyncio.Transport) -> str:
    peer = transport.get_extra_info("peername")
    return str(peer[0]) if peer else "?"


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
        self.every = every
        self.last: dict[str, float] = {}
        self.count: Counter[str] = Counter()

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        what = str(context.get("message", "error"))
        exc = context.get("exception")
        kind = f"{what}: {type(exc).__name__}" if exc is not None else what
        self.count[kind] += 1
        now = loop.time()
        if now - self.last.get(kind, float("-inf")) < self.every:
            return
        self.last[kind] = now
        n, self.count[kind] = self.count[kind], 0
        log.error("%s (%d time(s) in the last minute)%s", kind, n, f": {exc}" if exc is not None else "")


class Listener:
    def __init__(self, runner: web.AppRunner, tls_server: asyncio.AbstractServer | None = None) -> None:
        self.runner = runner
        self.tls_server = tls_server

    async def cleanup(self) -> None:
        if self.tls_server is not None:
            self.tls_server.close()
        await self.runner.cleanup()


async def start_listener(
    app: web.Application,
    listen: str,
    limiter: Limiter,
    header_timeout: float,
    tls: ssl.SSLContext | None = None,
    reuse_port: bool = False,
) -> Listener:
    app.middlewares.append(request_bounds(header_timeout))
    runner = web.AppRunner(app, **runner_options(header_timeout, limiter.name))
    await runner.setup()
    assert runner.server is not None
    limiter.install(runner.server)
    host, port = split_listen(listen)
    if tls is None:
        await web.TCPSite(runner, host, port, reuse_port=reuse_port).start()
        return Listener(runner)
    # aiohttp's sites cannot bound the TLS handshake, which happens before the limiter sees a connection: it is
    # part of what a new connection must finish within the header timeout
    server = await asyncio.get_running_loop().create_server(
        runner.server, host, port, ssl=tls, ssl_handshake_timeout=header_timeout, reuse_address=True,
    )
    return Listener(runner, server)
