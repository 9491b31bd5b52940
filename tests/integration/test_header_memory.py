"""What unauthenticated connections can make a real `llmgw server` hold in request headers: each has a small
budget for its headers (net/listeners.HEADER_BUDGET), so many connections sending the most headers aiohttp's
per-line limits allow (60 lines of 8,000 bytes) and never finishing them cost the server little memory, and give it
back once they are gone. Measured: the server's resident memory before, while they are open, and after."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from pathlib import Path

from bench.addresses import loopback

from llmgw.dev.cluster import NodePlan, admin_up
from tests.harness import await_until, plan, wait_until
from tests.integration.test_listener_exhaustion import rss_kib

CLIENTS = (loopback(), loopback(), loopback())
PER_CLIENT = 100  # under the API's per-client cap (256): nothing here is refused for the count of connections
LINES = 60
HEAD = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + b"".join(
    b"X-Pad-%d: " % i + b"a" * 8000 + b"\r\n" for i in range(LINES))  # and no blank line: never finished
BOUND_KIB = 48 * 1024  # what 300 connections may add, with allocator slack: 160 KiB each


def server_side(port: int) -> tuple[int, int]:
    """(sockets of the listener still open, bytes in their receive queues not yet read by the server)."""
    n = queued = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if int(cols[1].split(":")[1], 16) == port and cols[3] == "01":
                    n += 1
                    queued += int(cols[4].split(":")[1], 16)
    return n, queued


async def send_head(local: str, port: int) -> socket.socket | None:
    s = socket.socket()
    s.bind((local, 0))
    s.setblocking(False)
    loop = asyncio.get_running_loop()
    try:
        await loop.sock_connect(s, ("127.0.0.1", port))
        await asyncio.wait_for(loop.sock_sendall(s, HEAD), 10)
    except (OSError, TimeoutError):  # closed by the server for its headers' size: what the budget does
        s.close()
        return None
    return s


async def test_connections_that_never_finish_their_headers_cost_little_memory(tmp_path: Path) -> None:
    p = plan(tmp_path, [NodePlan(id="node01", address="127.0.0.1")], [])
    log = tmp_path / "server.log"
    with log.open("ab") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "llmgw.cli.main", "server", "-c", str(p.workdir / "server.yaml")],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=p.workdir,
        )
    socks: list[socket.socket] = []
    try:
        wait_until(lambda: admin_up(p), 20, "control plane up")
        before = rss_kib(server.pid)
        for local in CLIENTS:
            got = await asyncio.gather(*[send_head(local, p.api_port) for _ in range(PER_CLIENT)])
            socks.extend(s for s in got if s is not None)

        async def all_read() -> bool:
            return server_side(p.api_port)[1] == 0

        await await_until(all_read, 30, "the server reading every header sent")
        during = rss_kib(server.pid)
        for s in socks:
            s.close()

        async def all_gone() -> bool:
            return server_side(p.api_port)[0] == 0

        await await_until(all_gone, 30, "the server closing every connection")
        assert admin_up(p)
        after = rss_kib(server.pid)
        n = len(CLIENTS) * PER_CLIENT
        print(f"\nserver RSS: {before} KiB before, {during} KiB with {n} connections of {len(HEAD)} bytes of "
              f"unfinished headers, {after} KiB after they closed")
        assert during - before < BOUND_KIB, f"{during - before} KiB for {n} connections' headers"
        assert after - before < BOUND_KIB, f"{after - before} KiB still held after they closed"
    finally:
        for s in socks:
            s.close()
        server.terminate()
        server.wait(20)
    assert "Traceback" not in log.read_text(errors="replace")
