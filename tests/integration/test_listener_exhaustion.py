"""An unauthenticated client cannot exhaust the server: a real `llmgw server` under the open-file limit many hosts
still ship (here 512), flooded on its API port with slow and silent connections (bounded: 600 of them, for at
most the header timeout and a margin), keeps serving its agents, its operators and other API clients, closes
the slow ones, and says so in a few log lines rather than one per connection."""

from __future__ import annotations

import asyncio
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
from bench.addresses import engine_port_pair, loopback

from llmgw.dev.cluster import NodePlan, admin_post, admin_up
from tests.harness import await_until, plan, wait_until
from tests.integration.forger import HostileNode

FD_LIMIT = 512
FLOOD = 600
FLOOD_RSS_BOUND_KIB = 48 * 1024
HEADER_TIMEOUT = 10.0  # the default; the test does not configure anything the server does not do by itself


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def open_slow(port: int) -> socket.socket | None:
    """A connection that starts a request and never finishes its headers; None if refused outright."""
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect(("127.0.0.1", port))
        s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 2000)
    except OSError:
        s.close()
        return None
    return s


_SEEN_CLOSED: set[socket.socket] = set()


def closed_by_server(s: socket.socket) -> bool:
    """Whether the server has refused or closed s. Remembered once seen: the refusal's 503 is read off the socket
    the first time, so a second look at a socket the server has answered but not yet closed would find nothing
    to read and call it held (a full run counted 153 "held" after the cap had been seen to hold)."""
    if s in _SEEN_CLOSED:
        return True
    if _closed_now(s):
        _SEEN_CLOSED.add(s)
        return True
    return False


def _closed_now(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        data = s.recv(65536)
    except BlockingIOError:
        return False
    except OSError:
        return True
    return data == b"" or data.startswith(b"HTTP/1.1 503")


async def test_a_connection_flood_on_the_api_starves_nothing_else(tmp_path: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))  # the attacker's own sockets
    p = plan(tmp_path, [NodePlan(id="node01", address="127.0.0.1")], [])
    log = tmp_path / "server.log"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))

    with log.open("ab") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "llmgw.cli.main", "server", "-c", str(p.workdir / "server.yaml")],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=limit, cwd=p.workdir,
        )
    socks: list[socket.socket] = []
    try:
        wait_until(lambda: admin_up(p), 20, "control plane up")
        key = (await asyncio.to_thread(admin_post, p, "/api/keys", {"name": "other-client"}))["key"]
        rss_before = rss_kib(server.pid)
        started = time.monotonic()
        for _ in range(FLOOD):
            s = await asyncio.to_thread(open_slow, p.api_port)
            if s is not None:
                socks.append(s)
        # the server takes the flood from its listen backlog at its own pace (later on a busy machine: a CI run
        # failed with the server still catching up), so the cap is looked at until it holds, but only up to 2 s
        # before the first connection's header deadline, which would close them all whatever the cap did
        def held() -> list[socket.socket]:
            return [s for s in socks if not closed_by_server(s)]

        async def capped() -> bool:
            return len(held()) <= FD_LIMIT // 4

        left = HEADER_TIMEOUT - (time.monotonic() - started) - 2
        assert left > 0, f"opening the flood took {time.monotonic() - started:.1f}s"
        await await_until(capped, left, f"at most {FD_LIMIT // 4} of {FLOOD} slow connections held open")
        open_now = held()
        assert len(open_now) <= FD_LIMIT // 4, f"{len(open_now)} of {FLOOD} slow connections held open"
        # and connections to the agent port that never start their TLS handshake (they are not counted until it
        # ends, so only the handshake deadline frees them)
        for _ in range(100):
            a = socket.create_connection(("127.0.0.1", p.agent_port), timeout=2)
            socks.append(a)
            open_now.append(a)

        # while the flood is on: the operators, the agents and another API client are all still served
        assert await asyncio.to_thread(admin_up, p)
        status, body = await HostileNode(p, "node01", "127.0.0.1", engine_port_pair()).heartbeat()
        assert status == 200, body
        conn = aiohttp.TCPConnector(local_addr=(loopback(), 0))
        async with aiohttp.ClientSession(connector=conn) as client, client.get(
            p.api + "/v1/models", headers={"Authorization": f"Bearer {key}"}
        ) as r:
            assert r.status == 200
        rss_after = rss_kib(server.pid)

        # slow connections are closed at the header deadline, not kept for an hour
        async def all_closed() -> bool:
            return all(closed_by_server(s) for s in open_now)

        await await_until(all_closed, HEADER_TIMEOUT + 5, "the server closing connections that never finished")
        assert await asyncio.to_thread(admin_up, p)
        assert time.monotonic() - started < HEADER_TIMEOUT + 10
    finally:
        for s in socks:
            s.close()
        server.terminate()
        server.wait(20)
    text = log.read_text(errors="replace")
    assert text.count("refusing connections") <= 2 and "Traceback" not in text, text[-3000:]
    print(f"server RSS {rss_before} KiB before the flood, {rss_after} KiB during it")
    # what the flood may cost while it lasts (docs/benchmarks.md): the bound is generous, so only a gross change in
    # the listener's buffering (such as 0.5-1 MB per slow connection) trips it
    assert rss_after - rss_before < FLOOD_RSS_BOUND_KIB, f"the flood cost {rss_after - rss_before} KiB of RSS"
