"""What keys' request bodies can make a real `llmgw server` hold.

A few KB of gzip inflate to nearly the body limit (8 MiB), and aiohttp inflated a body as it arrived, before any
handler ran: 240 such bodies left hanging grew the server by about 330 MB, and it held 630 MB after they closed.
Compressed bodies are now refused (415) before a byte is read or inflated. Bodies sent as they are cost the client
their bytes, but keys are many: every request holds its body's share of `router.body_budget` until it ends (a
chunked one at the body limit), and beyond it is refused 503 before its body is read; a key without limits may
have `router.key_uploads` bodies arriving at once. Measured: the server's resident memory before, while the bodies
hang, and after they close."""

from __future__ import annotations

import asyncio
import gzip
import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.addresses import loopback

from llmgw.dev.cluster import Cluster, ClusterPlan, NodePlan, admin_post, admin_up
from tests.harness import await_until, plan, wait_until
from tests.integration.test_header_memory import server_side
from tests.integration.test_listener_exhaustion import rss_kib

CLIENT = loopback()
INFLATED = 7 * 1024 * 1024  # under the default body limit (8 MiB): nothing is refused for its size
# the JSON never closed, the chunked body never ended: the rest never comes
BOMB = gzip.compress(b'{"model": "m", "pad": "' + b"a" * INFLATED, compresslevel=9)
CONNECTIONS = 240  # under the API's per-client cap (256): none is refused for the count of connections
BOUND_KIB = 100 * 1024


@contextmanager
def server(p: ClusterPlan) -> Iterator[subprocess.Popen[bytes]]:
    """The control plane alone (llmgw.dev.cluster's start), its log checked for tracebacks once it stopped."""
    c = Cluster(p)
    proc = c.start_server()
    try:
        wait_until(lambda: admin_up(p), 60, "control plane up")
        yield proc
    finally:
        c.stop()
    assert "Traceback" not in c.log("server")


def head(key: str, encoding: str) -> bytes:
    return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\n{encoding}Transfer-Encoding: chunked\r\n\r\n").encode()


async def hang(port: int, first: bytes, body: bytes) -> tuple[socket.socket, bytes]:
    """A connection that sent `first` (the headers), then, unless it was answered at once, `body` as one chunk (the
    last never sent); and the first line of the answer it had before its body (b"" when it had none)."""
    s = socket.socket()
    s.bind((CLIENT, 0))
    s.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(s, ("127.0.0.1", port))
    await loop.sock_sendall(s, first)
    try:
        said = await asyncio.wait_for(loop.sock_recv(s, 4096), 2.0)
    except TimeoutError:
        said = b""
        await loop.sock_sendall(s, f"{len(body):x}\r\n".encode() + body + b"\r\n")
    return s, said.split(b"\r\n", 1)[0]


async def attack(p: ClusterPlan, pid: int, first: list[bytes], body: bytes) -> tuple[int, int, list[bytes]]:
    """(KiB the server grew while the bodies hung, KiB it still held after they closed, each first answer line)."""
    before = rss_kib(pid)
    socks: list[socket.socket] = []
    try:
        got = await asyncio.gather(*[hang(p.api_port, h, body) for h in first])
        socks = [s for s, _ in got]

        async def all_read() -> bool:
            return server_side(p.api_port)[1] == 0

        await await_until(all_read, 60, "the server reading every chunk sent")
        during = rss_kib(pid)
    finally:
        for s in socks:
            s.close()

    async def all_gone() -> bool:
        return server_side(p.api_port)[0] == 0

    await await_until(all_gone, 60, "the server closing every connection")
    assert admin_up(p)
    return during - before, rss_kib(pid) - before, [said for _, said in got]


def keys_of(p: ClusterPlan, n: int) -> list[str]:
    """`n` keys, each seen by the router (it answers them 200)."""
    keys = [admin_post(p, "/api/keys", {"name": f"k{i}"})["key"] for i in range(n)]

    def known(key: str) -> bool:
        req = urllib.request.Request(p.api + "/v1/models", headers={"Authorization": f"Bearer {key}"})
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return int(r.status) == 200
        except urllib.error.HTTPError:
            return False

    for key in keys:
        wait_until(lambda: known(key), 30, "the router knowing a new key")  # noqa: B023 (waited for at once)
    return keys


async def test_compressed_bodies_are_refused_before_they_are_inflated(tmp_path: Path) -> None:
    assert len(BOMB) < 16 * 1024, len(BOMB)
    p = plan(tmp_path, [NodePlan(id="node01", address="127.0.0.1")], [])
    with server(p) as proc:
        keys = keys_of(p, 10)
        first = [head(keys[i % 10], "Content-Encoding: gzip\r\n") for i in range(CONNECTIONS)]
        grew, held, said = await attack(p, proc.pid, first, BOMB)
        print(f"\nserver RSS: +{grew} KiB with {CONNECTIONS} gzip bodies of {len(BOMB)} bytes (inflating to "
              f"{INFLATED}) hanging, +{held} KiB after they closed; answered at once: {sorted(set(said))}")
        assert set(said) == {b"HTTP/1.1 415 Unsupported Media Type"}, sorted(set(said))
        assert grew < BOUND_KIB and held < BOUND_KIB, (grew, held)


async def test_bodies_beyond_the_servers_budget_are_refused_before_they_are_read(tmp_path: Path) -> None:
    """Sixty chunked bodies of 7 MiB from ten keys (six each: within their default of eight arriving at once)
    against a budget of 64 MiB (eight bodies of unstated length): eight are read, the rest refused at once."""
    p = plan(tmp_path, [NodePlan(id="node01", address="127.0.0.1")], [],
             extra_server={"router": {"body_budget": 64 * 1024 * 1024}})
    body = b'{"model": "m", "pad": "' + b"a" * INFLATED
    with server(p) as proc:
        keys = keys_of(p, 10)
        first = [head(keys[i % 10], "") for i in range(60)]
        grew, held, said = await attack(p, proc.pid, first, body)
        print(f"\nserver RSS: +{grew} KiB with 60 bodies of {len(body)} bytes hanging, +{held} KiB after they "
              f"closed; answered at once: {sorted(set(said))}")
        refused = [s for s in said if s]
        assert len(refused) == 52 and set(refused) == {b"HTTP/1.1 503 Service Unavailable"}, said
        assert grew < 8 * INFLATED // 1024 + BOUND_KIB, grew


async def test_a_key_without_limits_has_eight_bodies_arriving_at_once(tmp_path: Path) -> None:
    """Before, a key without a concurrency limit could have as many bodies arriving as it had connections."""
    p = plan(tmp_path, [NodePlan(id="node01", address="127.0.0.1")], [])
    with server(p) as proc:
        (key,) = keys_of(p, 1)
        _, _, said = await attack(p, proc.pid, [head(key, "")] * 12, b'{"model": "m", "pad": "')
        assert sorted(said) == [b""] * 8 + [b"HTTP/1.1 429 Too Many Requests"] * 4, said
