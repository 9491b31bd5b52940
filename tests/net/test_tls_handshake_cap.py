"""TCP connections to a TLS listener are counted from their accept, not from the end of their handshake: a flood
of connections that never start one (1,500 of them took a control plane's 1,024 file descriptors) holds at most
the handshake allowance, and an agent's own handshake still gets through."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import aiohttp

from llmgw.net.handshakes import handshake_cap
from llmgw.net.listeners import Limiter, start_listener
from tests.agent.weights.kit import make_pki
from tests.harness import await_until, free_port
from tests.net.test_guards_connection_caps import PLAIN, ok_app, server_side_established

FLOOD = 200
CAP = 16


async def test_connections_that_never_handshake_hold_no_more_than_the_allowance(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    port = free_port()
    lim = Limiter("agent", CAP, 4, PLAIN)
    # a handshake deadline far beyond the test: only the cap can close the flood's connections in time
    listener = await start_listener(ok_app(), f"127.0.0.1:{port}", lim, 60.0, tls=pki.server("controlplane"))
    loop = asyncio.get_running_loop()
    socks: list[socket.socket] = []
    try:
        for _ in range(FLOOD):
            s = socket.socket()
            s.setblocking(False)
            await loop.sock_connect(s, ("127.0.0.1", port))
            socks.append(s)
        allowance = handshake_cap(CAP)
        assert allowance < FLOOD // 4

        async def capped() -> bool:
            return server_side_established(port) <= allowance

        started = time.monotonic()
        await await_until(capped, 10, f"at most {allowance} of {FLOOD} connections without a handshake held")
        assert time.monotonic() - started < 30  # well before the handshake deadline
        conn = aiohttp.TCPConnector(ssl=pki.client("node01"))
        async with aiohttp.ClientSession(connector=conn) as client, client.get(f"https://127.0.0.1:{port}/") as r:
            assert r.status == 200
    finally:
        for s in socks:
            s.close()
        await listener.cleanup()
