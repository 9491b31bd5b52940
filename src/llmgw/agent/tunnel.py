"""Authenticated tunnels for engine ranks that talk to each other without authentication (ggml-rpc-server). A
worker's gate listens on the node's address with mutual TLS and passes a connection on only after the replica's
secret came over it; the leader's gate carries a loopback port per worker there, and the engine is given those."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import ssl

from llmgw.agent.engines.base import LOOPBACK

log = logging.getLogger(__name__)

HANDSHAKE_S = 10.0  # the TLS handshake and the secret, from the connection's opening
SECRET_MAX = 512
CHUNK = 1 << 16
TUNNEL_CONNECTIONS = 64  # a leader opens a few per worker; beyond this, a connection is closed at once


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(CHUNK):
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, ssl.SSLError, OSError):
        pass


async def _splice(a: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                  b: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
    """Both ways until either side ends; then both are closed (a half-closed TLS stream is not to be had)."""
    pumps = [asyncio.ensure_future(_pump(a[0], b[1])), asyncio.ensure_future(_pump(b[0], a[1]))]
    try:
        await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for p in pumps:
            p.cancel()
        for w in (a[1], b[1]):
            w.close()
        await asyncio.gather(*pumps, return_exceptions=True)


async def serve_in(host: str, port: int, engine_port: int, secret: str, tls: ssl.SSLContext) -> asyncio.Server:
    """The worker's side: mutual TLS and the secret on host:port, then the engine on loopback `engine_port`."""
    expected = secret.encode() + b"\n"
    open_now = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal open_now
        peer = writer.get_extra_info("peername")
        if open_now >= TUNNEL_CONNECTIONS:
            writer.close()
            return
        open_now += 1
        try:
            try:
                async with asyncio.timeout(HANDSHAKE_S):
                    given = await reader.readuntil(b"\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError) as e:
                log.warning("tunnel: %s sent no secret: %s", peer, type(e).__name__)
                writer.close()
                return
            if not secret or len(given) > SECRET_MAX or not hmac.compare_digest(given, expected):
                log.warning("tunnel: refused %s: not the replica's secret", peer)
                writer.close()
                return
            try:
                engine = await asyncio.open_connection(LOOPBACK, engine_port)
            except OSError as e:
                log.warning("tunnel: the engine on %s:%d is not reachable: %s", LOOPBACK, engine_port, e)
                writer.close()
                return
            await _splice((reader, writer), engine)
        finally:
            open_now -= 1

    return await asyncio.start_server(handle, host, port, ssl=tls, ssl_handshake_timeout=HANDSHAKE_S,
                                      reuse_address=True)


async def serve_out(local_port: int, host: str, port: int, secret: str, tls: ssl.SSLContext) -> asyncio.Server:
    """The leader's side: loopback `local_port`, carried to a worker's tunnel at host:port (checked to be a node of
    this cluster at that address)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(HANDSHAKE_S):
                remote = await asyncio.open_connection(host, port, ssl=tls, server_hostname=host)
        except (OSError, TimeoutError, ssl.SSLError) as e:
            log.warning("tunnel: cannot reach %s:%d: %s", host, port, e)
            writer.close()
            return
        remote[1].write(secret.encode() + b"\n")
        with contextlib.suppress(ConnectionError):
            await remote[1].drain()
        await _splice((reader, writer), remote)

    return await asyncio.start_server(handle, LOOPBACK, local_port, reuse_address=True)
