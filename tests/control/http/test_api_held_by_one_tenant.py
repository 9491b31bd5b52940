"""One tenant cannot hold the API listener: the real router behind the real API listener (start_listener, the
API's limiter), spoken to with raw sockets on loopback. A refusal made before the body is read closes the
connection at once (no lingering read of a body nobody wants); a key may upload no more bodies at once than its
concurrency; a body must keep a minimum rate over every window; at the cap the slowest upload is closed for a new
connection; IPv6 clients are counted per /64."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.addresses import loopback

from llmgw.config.server import ServerConfig, TLSFiles
from llmgw.control.http.api_listener import api_refusal
from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.core.limits import KeyLimits
from llmgw.net.guards import UPLOAD_GRACE_S
from llmgw.net.listeners import Limiter, client_of_address, start_listener
from llmgw.router.app import Router
from llmgw.router.keys import KeyRing
from llmgw.store.sqlite import SqliteStore
from tests.harness import await_until, free_port, local_state
from tests.net.test_guards_connection_caps import connect, response, settle
from tests.router.conftest import models

SECOND_CLIENT = loopback()  # a client at another address than 127.0.0.1 (bench/addresses.py)

MB8 = 8 * 1024 * 1024
CHAT = "/v1/chat/completions"


@dataclass
class Api:
    port: int
    limiter: Limiter
    plane: ControlPlane
    socks: list[socket.socket]

    async def key(self, limits: KeyLimits | None = None) -> str:
        raw, _ = await self.plane.credentials.create_key("tenant", [], limits)
        return raw

    async def upload(self, key: str | None, announced: int = MB8, sent: bytes = b"{", local: str = "127.0.0.1",
                     family: int = socket.AF_INET) -> socket.socket:
        """A connection that announces a body of `announced` bytes and sends only `sent` of it."""
        s = await connect_to(self.port, local, family)
        self.socks.append(s)
        auth = f"Authorization: Bearer {key}\r\n" if key else ""
        head = (f"POST {CHAT} HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\n"
                f"Content-Length: {announced}\r\n\r\n").encode()
        await asyncio.get_running_loop().sock_sendall(s, head + sent)
        return s


async def connect_to(port: int, local: str, family: int) -> socket.socket:
    if family == socket.AF_INET:
        return await connect(port, local)
    s = socket.socket(family)
    s.setblocking(False)
    await asyncio.get_running_loop().sock_connect(s, ("::1", port))
    return s


@asynccontextmanager
async def api(tmp_path: Path, max_total: int = 64, per_client: int = 64, header_timeout: float = 10.0,
              host: str = "127.0.0.1") -> AsyncIterator[Api]:
    cfg = ServerConfig(tls=TLSFiles(ca="x", cert="x", key="x"), models=models(), max_body=16 * 1024 * 1024)
    store = SqliteStore(tmp_path / "llmgw.db").open()
    plane = ControlPlane(cfg, store, FakeClock())
    plane.load()
    router = Router(local_state(plane), KeyRing(store), cfg.router, cfg.load_wait, cfg.max_body)
    lim = Limiter("api", max_total, per_client, api_refusal())
    port = free_port()
    listen = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    listener = await start_listener(router.app(), listen, lim, header_timeout)
    a = Api(port, lim, plane, [])
    try:
        yield a
    finally:
        for s in a.socks:
            s.close()
        await settle(lim)
        await listener.cleanup()
        await router.close()
        store.close()


async def closed_within(s: socket.socket, within: float) -> bool:
    """Whether the server closes `s` within `within` seconds (what it sends meanwhile is read and dropped)."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(within):
            while await loop.sock_recv(s, 65536):
                pass
            return True
    except ConnectionError:
        return True
    except TimeoutError:
        return False


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


async def test_a_request_refused_before_its_body_is_closed_at_once(tmp_path: Path) -> None:
    """An unauthenticated 8 MB upload is answered 401 and its connection closed at once: before, the server went
    on reading (and counting) it for 10 s of lingering close."""
    async with api(tmp_path) as a:
        s = await a.upload(None)
        answer = await response(s, 5)
        assert status_of(answer) == 401, answer[:80]
        assert b"connection: close" in answer.lower()
        assert await closed_within(s, 2.0), "the refused upload's connection is still open"


async def test_a_key_uploads_no_more_bodies_at_once_than_its_concurrency(tmp_path: Path) -> None:
    """A key with `concurrency: 1` held a connection per trickled body, as many as it liked: its second upload
    while the first is still arriving is refused 429 at once, before its body is read, and closed."""
    async with api(tmp_path) as a:
        key = await a.key(KeyLimits(concurrency=1))
        first = await a.upload(key)
        await await_until(lambda: a.limiter.uploads.open, 5, "the first upload open", interval=0.01)
        second = await a.upload(key, local=SECOND_CLIENT)
        answer = await response(second, 3)
        assert status_of(answer) == 429, answer[:200]
        assert json.loads(answer.partition(b"\r\n\r\n")[2])["error"]["code"] == "rate_limit_exceeded"
        assert await closed_within(second, 2.0)
        assert not await closed_within(first, 0.2), "the first upload is not the one refused"


async def test_one_key_from_many_addresses_cannot_hold_the_listener(tmp_path: Path) -> None:
    """The attack run's shape, scaled down: a key with `concurrency: 1` opens as many uploads as the listener
    holds, from four addresses, and trickles each; ten other clients' requests are then all served (they were
    all 503)."""
    async with api(tmp_path, max_total=16, per_client=8) as a:
        key = await a.key(KeyLimits(concurrency=1))
        other = await a.key()
        fours = [loopback() for _ in range(4)]
        attack = [await a.upload(key, local=fours[i % 4]) for i in range(16)]
        refused = [await closed_within(s, 2.0) for s in attack]
        assert sum(refused) >= 15, f"{16 - sum(refused)} of 16 uploads of one key held open"
        loop = asyncio.get_running_loop()
        for i in range(10):
            s = await connect(a.port, loopback())
            a.socks.append(s)
            await loop.sock_sendall(
                s, f"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {other}\r\n\r\n".encode())
            answer = await response(s, 3)
            assert status_of(answer) == 200, (i, answer[:120])


async def test_a_body_trickled_in_is_answered_408_after_a_window_without_the_minimum_rate(tmp_path: Path) -> None:
    """8 MB announced, a byte every 0.1 s: refused once a window (the header timeout, here 1 s) has passed below
    the minimum rate, not after the header timeout plus 128 s that its announced length allowed before."""
    async with api(tmp_path, header_timeout=1.0) as a:
        key = await a.key()
        s = await a.upload(key)
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        answer = b""
        while time.monotonic() - started < 8 and not answer:
            try:
                await loop.sock_sendall(s, b" ")
            except ConnectionError:
                break
            answer = await response(s, 0.1)  # the attack's pace: a byte every 0.1 s
        assert status_of(answer) == 408, f"after {time.monotonic() - started:.1f}s: {answer[:80]!r}"
        assert time.monotonic() - started < 4


async def test_at_the_cap_the_slowest_upload_is_closed_for_a_new_connection(tmp_path: Path) -> None:
    """Every connection of a full listener is a body trickling in (nothing only waits): the next client was
    refused 503. Now the slowest upload is closed for it."""
    async with api(tmp_path, max_total=4, per_client=4) as a:
        key = await a.key()
        uploads = [await a.upload(key, sent=b"{" * (i + 1)) for i in range(4)]
        await await_until(lambda: len(a.limiter.uploads.open) >= 4, 5, "four uploads open", interval=0.01)
        assert len(a.limiter.uploads.open) == 4
        await asyncio.sleep(UPLOAD_GRACE_S + 0.1)  # younger uploads are not judged by their rate yet
        other = await connect(a.port, SECOND_CLIENT)
        a.socks.append(other)
        await asyncio.get_running_loop().sock_sendall(
            other, f"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\r\n".encode())
        answer = await response(other, 3)
        assert status_of(answer) == 200, answer[:120]
        assert await closed_within(uploads[0], 2.0), "the slowest upload (one byte) is the one closed"
        assert a.limiter.evicted == 1


def test_ipv6_clients_are_counted_per_64() -> None:
    assert client_of_address("2001:db8:1:2::1") == client_of_address("2001:db8:1:2:ffff::9") == "2001:db8:1:2::/64"
    assert client_of_address("2001:db8:1:3::1") != client_of_address("2001:db8:1:2::1")
    assert client_of_address("::ffff:10.0.0.1") == "10.0.0.1"
    assert client_of_address("10.0.0.1") == "10.0.0.1"


async def test_an_ipv6_connection_is_counted_under_its_64(tmp_path: Path) -> None:
    async with api(tmp_path, host="::1") as a:
        s = await connect_to(a.port, "::1", socket.AF_INET6)
        a.socks.append(s)
        await asyncio.get_running_loop().sock_sendall(s, b"GET /v1/models HTTP/1.1\r\n")  # and waits
        await await_until(lambda: a.limiter.per_client, 5, "the connection counted", interval=0.01)
        assert list(a.limiter.per_client) == ["::/64"]
