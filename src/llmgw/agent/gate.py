"""The agent's door to an engine: the only way to a replica's HTTP engine from the network. The engine binds
loopback; the gate listens at the replica's address and port and passes on only requests that carry the replica's
secret, on every path and every request of a kept-alive connection. Bodies stream both ways as they arrive. A
request that never reached the engine is answered 502 with UNREACHED_HEADER: the router may try another replica."""

from __future__ import annotations

import asyncio
import hmac
import logging
import socket
from collections.abc import Awaitable
from typing import TypeVar

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from llmgw.agent.engines.base import LOOPBACK
from llmgw.core.errors import ClientGone
from llmgw.net.listeners import Limiter, Listener, refusal, start_listener
from llmgw.wire.messages import UNREACHED_HEADER

log = logging.getLogger(__name__)
T = TypeVar("T")

HEADER_TIMEOUT = 10.0  # above the router's keep-alive (it drops idle connections first), as the engines' own were
CONNECT_S = 5.0
ENGINE_KEEPALIVE_S = 2.0
# while the engine is quiet, how often the gate looks whether the router is still there: an abandoned request
# is given up within this (llama-server stops generating when its connection closes)
CLIENT_CHECK_S = 0.5
# connections: the router holds up to connections_per_replica per worker; at the cap, connections that only wait
# (an unauthenticated client's, say) are closed for new ones (net/listeners.py)
GATE_CONNECTIONS = 4096
# headers that describe one connection, not the request: never passed on (Content-Length is: the body streams)
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                        "transfer-encoding", "upgrade", "host"})

AUTO_HEADERS = ("Accept", "Accept-Encoding", "User-Agent", "Content-Type")


class EngineGate:
    """Checks the secret and relays one engine's traffic. `secret` "": relays every request (a replica without
    one: only a test's, or an old control plane's)."""

    def __init__(self, secret: str, upstream: str) -> None:
        self._expected = f"Bearer {secret}".encode() if secret else b""
        self.upstream = upstream  # http://127.0.0.1:PORT, where the engine listens
        self._session: aiohttp.ClientSession | None = None
        self.listener: Listener | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=0)  # the router bounds bodies; an unauthenticated one is never read
        app.router.add_route("*", "/{tail:.*}", self.relay)
        return app

    async def open(self, host: str, port: int) -> None:
        limiter = Limiter("engine", GATE_CONNECTIONS, GATE_CONNECTIONS, refusal(b'{"error": "too many connections"}'))
        listen = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.listener = await start_listener(self.app(), listen, limiter, HEADER_TIMEOUT)

    async def close(self) -> None:
        if self.listener is not None:
            await self.listener.cleanup()
            self.listener = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            # kept alive (a fresh connection per request doubles the gate's CPU), idle ones dropped before the
            # engines drop theirs (after 5 s): a request written into a closing connection would fail unretried
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=ENGINE_KEEPALIVE_S)
            # the request as the router sent it: no headers of aiohttp's own (an Accept-Encoding it added could
            # get the router a compressed answer it never asked for)
            self._session = aiohttp.ClientSession(
                connector=connector, auto_decompress=False, skip_auto_headers=AUTO_HEADERS,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_S))
        return self._session

    def allows(self, request: web.Request) -> bool:
        if not self._expected:
            return True
        given = request.headers.get("Authorization", "").encode(errors="replace")
        return hmac.compare_digest(given, self._expected)

    async def relay(self, request: web.Request) -> web.StreamResponse:
        if not self.allows(request):
            resp = _error(401, "this port answers only the router: send the replica's secret")
            resp.force_close()  # an unread body is not lingered over (aiohttp would read it for seconds)
            return resp
        if not request.raw_path.startswith("/"):
            return _error(400, "a request target must be a path")
        headers = CIMultiDict((k, v) for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP)
        if "close" in request.headers.get("Connection", "").lower():
            # the router's word that this exchange ends its connection (a stream to an engine that drops its
            # connection after one without saying so: llama-server): the engine's connection ends with it too,
            # rather than being pooled the moment the last byte arrives and failing the next request written into it
            headers["Connection"] = "close"
        url = URL(self.upstream + request.raw_path, encoded=True)
        data = request.content if request.body_exists else None
        try:
            upstream = await _while_there(request, self._http().request(
                request.method, url, headers=headers, data=data, allow_redirects=False))
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as e:
            resp = _error(502, f"the engine is not reachable on its node: {type(e).__name__}")
            resp.headers[UNREACHED_HEADER] = "1"
            return resp
        except ClientGone:
            return web.Response(status=499)  # (nobody reads it)
        except (aiohttp.ClientError, TimeoutError) as e:
            return _error(502, f"the engine failed: {type(e).__name__}")
        async with upstream:
            return await self._stream(request, upstream)

    async def _stream(self, request: web.Request, upstream: aiohttp.ClientResponse) -> web.StreamResponse:
        out = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        for k, v in upstream.headers.items():
            if k.lower() not in HOP_BY_HOP:
                out.headers.add(k, v)
        try:
            await out.prepare(request)
            while True:
                try:
                    async with asyncio.timeout(CLIENT_CHECK_S):
                        chunk = await upstream.content.readany()  # (cancelled, it loses nothing)
                except TimeoutError:
                    if _gone(request):
                        break
                    continue
                if not chunk:
                    await out.write_eof()
                    break
                await out.write(chunk)
        except (ConnectionError, aiohttp.ClientError) as e:
            # either side broke off: the answer is incomplete, so the router's connection goes too (a kept-alive
            # connection must not carry on after half an answer)
            log.debug("gate: relay broken off: %s", e)
            if request.transport is not None:
                request.transport.abort()
        upstream.close()  # the engine stops generating for a router that is gone
        return out


def _gone(request: web.Request) -> bool:
    t = request.transport
    return t is None or t.is_closing()


async def _while_there(request: web.Request, aw: Awaitable[T]) -> T:
    """`aw`, given up when the router goes away first (a hung engine would otherwise hold the gate forever)."""
    task = asyncio.ensure_future(aw)
    while True:
        done, _ = await asyncio.wait({task}, timeout=CLIENT_CHECK_S)
        if done:
            return task.result()
        if _gone(request):
            task.cancel()
            raise ClientGone()


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": "gate_error"}}, status=status)


def loopback_ports(n: int) -> list[int]:
    """`n` different loopback ports free now, for engines and tunnels behind a gate (the kernel's choice among
    ephemeral ones; all held until all are chosen, so none repeats)."""
    held = []
    try:
        for _ in range(n):
            s = socket.socket()
            held.append(s)
            s.bind((LOOPBACK, 0))
        return [int(s.getsockname()[1]) for s in held]
    finally:
        for s in held:
            s.close()
