"""Check 13: hostile clients on every listener of a real control plane (slowloris, oversize headers and bodies,
invalid UTF-8, deep JSON, 2,000 idle connections) are bounded, answered in the listener's envelope where possible,
and every listener goes on serving others. The header timeout is short (2 s) so deadlines fall within the suite."""

from __future__ import annotations

import asyncio
import json
import resource
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from bench.addresses import engine_port_pair, loopback

from llmgw.dev.cluster import ClusterPlan, NodePlan, admin_post, admin_up
from llmgw.pki.tls import client_context
from tests.harness import free_port, plan, wait_until
from tests.integration.forger import HostileNode
from tests.reliability.figures import record

# its tests share a module fixture that starts processes: one worker runs them all (make test: --dist loadgroup)
pytestmark = pytest.mark.xdist_group("hostile_clients")

HEADER_TIMEOUT = 2.0
IDLE = 2000
MARGIN = 2.0  # a deadline's timer, the event loop's turn and this test's polling


@dataclass
class Door:
    """One listener as a client sees it: where it is, how to speak to it, and a request it answers 200."""

    name: str
    port: int
    tls: ssl.SSLContext | None = None
    auth: dict[str, str] = field(default_factory=dict)
    post: str | None = None  # a path whose handler reads a JSON body
    get: str = "/"
    max_body: int = 0
    openai: bool = False  # its errors are OpenAI's envelope, {"error": {"message", "type", "code"}}
    local: str = "127.0.0.1"

    def head(self, method: str, path: str, extra: str = "") -> bytes:
        lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{self.port}",
                 *(f"{k}: {v}" for k, v in self.auth.items())]
        if extra:
            lines.append(extra)
        return ("\r\n".join(lines) + "\r\n").encode()


@dataclass
class Server:
    p: ClusterPlan
    doors: dict[str, Door]
    node: HostileNode
    log: Path


Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def dial(d: Door, local: str | None = None) -> Streams:
    return await asyncio.open_connection(
        "127.0.0.1", d.port, ssl=d.tls, server_hostname="127.0.0.1" if d.tls else None,
        local_addr=(local or d.local, 0),
    )


async def answer(r: asyncio.StreamReader, within: float) -> tuple[int, dict[str, str], bytes] | None:
    """The response on a connection (status, headers, body), or None if the server closed it without one."""
    async with asyncio.timeout(within):
        try:
            line = await r.readline()
            if not line:
                return None
            status = int(line.split()[1])
            headers = {}
            while (h := await r.readline()) not in (b"\r\n", b""):
                k, _, v = h.decode("latin-1").partition(":")
                headers[k.strip().lower()] = v.strip()
            n = int(headers.get("content-length", "0"))
            body = await r.readexactly(n) if n else b""
            return status, headers, body
        except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError):
            return None


async def closed(r: asyncio.StreamReader, within: float) -> bool:
    """Whether the server closes the connection within `within` (whatever it says first)."""
    try:
        async with asyncio.timeout(within):
            while await r.read(65536):
                pass
        return True
    except (ConnectionError, ssl.SSLError):
        return True
    except TimeoutError:
        return False


async def ask(d: Door, method: str, path: str, body: bytes = b"", extra: str = "",
              local: str | None = None) -> tuple[int, dict[str, str], bytes] | None:
    r, w = await dial(d, local)
    try:
        head = d.head(method, path, extra)
        if body or method == "POST":
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n".encode()
        w.write(head + b"\r\n" + body)
        await w.drain()
        return await answer(r, 10)
    finally:
        w.close()


def in_envelope(d: Door, body: bytes) -> str:
    """The error's message, read as the listener's own envelope says (a test failure if it is not in it)."""
    data = json.loads(body)
    if d.openai:
        assert isinstance(data["error"], dict) and {"message", "type", "code"} <= set(data["error"]), data
        return str(data["error"]["message"])
    assert isinstance(data["error"], str), data
    return data["error"]


async def serving(s: Server, exclude_local: str = "127.0.0.1") -> dict[str, int]:
    """Every listener answered, each to a client that is not the attacker (another address where the listener is
    reachable from one; the management API and metrics are on loopback, where every client is 127.0.0.1)."""
    out = {}
    for name, d in s.doors.items():
        if name == "agent":
            status, _ = await s.node.heartbeat()
            out[name] = status
            continue
        got = await ask(d, "GET", d.get, local=loopback() if name == "api" else None)
        out[name] = got[0] if got else 0
    return out


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 16384)), hard))  # the attacker's sockets
    tmp = tmp_path_factory.mktemp("hostile")
    metrics_port = free_port()
    p = plan(tmp, [NodePlan(id="node01", address="127.0.0.1")], [], heartbeat_interval="0.5s",
             extra_server={"metrics_listen": f"127.0.0.1:{metrics_port}",
                           "connections": {"header_timeout": f"{HEADER_TIMEOUT}s"}})
    log = tmp / "server.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "llmgw.cli.main", "server", "-c", str(p.workdir / "server.yaml")],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=p.workdir,
        )
    try:
        wait_until(lambda: admin_up(p), 20, "control plane up")
        key = admin_post(p, "/api/keys", {"name": "hostile"})["key"]
        token = p.token_file.read_text().strip()
        pki = p.workdir / "pki"
        tls = client_context(pki / "node01.crt", pki / "node01.key", pki / "ca.crt")
        doors = {
            "api": Door("api", p.api_port, auth={"Authorization": f"Bearer {key}"}, post="/v1/chat/completions",
                        get="/v1/models", max_body=8 * 1024 * 1024, openai=True),
            "admin": Door("admin", p.admin_port, auth={"Authorization": f"Bearer {token}"}, post="/api/keys",
                          get="/api/status", max_body=16 * 1024 * 1024),
            "metrics": Door("metrics", metrics_port, get="/metrics"),
            "agent": Door("agent", p.agent_port, tls=tls, post="/v1/agent/heartbeat", max_body=1024 * 1024),
        }
        yield Server(p, doors, HostileNode(p, "node01", "127.0.0.1", engine_port_pair()), log)
    finally:
        proc.terminate()
        proc.wait(20)
    text = log.read_text(errors="replace")
    assert "Traceback" not in text, text[-5000:]


POSTERS = ["api", "admin", "agent"]
ALL = ["api", "admin", "metrics", "agent"]


@pytest.mark.parametrize("name", ALL)
async def test_headers_trickled_in_are_cut_off_at_the_header_timeout(server: Server, name: str) -> None:
    d = server.doors[name]
    r, w = await dial(d)
    started = time.monotonic()
    w.write(d.head("GET", d.get))
    cut = None
    for i in range(int((HEADER_TIMEOUT + MARGIN) / 0.2) + 5):
        try:
            w.write(f"X-Slow-{i}: a\r\n".encode())  # a header line every 0.2 s, never the blank line
            await w.drain()
        except (ConnectionError, ssl.SSLError):
            cut = time.monotonic() - started
            break
        if await closed(r, 0.2):
            cut = time.monotonic() - started
            break
    w.close()
    took = time.monotonic() - started
    assert cut is not None and cut <= HEADER_TIMEOUT + MARGIN, f"{name}: still open after {took:.1f}s"
    record(f"{name}: headers trickled in, connection closed after (s)", cut, f"header_timeout {HEADER_TIMEOUT}s")
    assert await serving(server) == {"api": 200, "admin": 200, "metrics": 200, "agent": 200}


@pytest.mark.parametrize("name", POSTERS)
async def test_a_body_trickled_in_is_answered_408_at_its_deadline(server: Server, name: str) -> None:
    """An authenticated client (an unauthenticated one is refused before its body is read) that sends its headers
    and then its body a byte at a time: answered 408, in the listener's envelope, at a deadline that grows with
    the announced size, not held for as long as the client likes."""
    d = server.doors[name]
    length = 20_000
    r, w = await dial(d)
    w.write(d.head("POST", d.post or "/", f"Content-Type: application/json\r\nContent-Length: {length}") + b"\r\n")
    started = time.monotonic()
    got = None
    sent = 0
    while time.monotonic() - started < HEADER_TIMEOUT + 10:
        try:
            w.write(b" ")
            sent += 1
            await w.drain()
        except (ConnectionError, ssl.SSLError):
            break
        try:
            got = await answer(r, 0.2)
            break
        except TimeoutError:
            continue
    took = time.monotonic() - started
    w.close()
    assert got is not None, f"{name}: no answer after {took:.1f}s and {sent} bytes of the body"
    status, _, body = got
    assert status == 408, (status, body)
    assert "body" in in_envelope(d, body)
    assert took <= HEADER_TIMEOUT + MARGIN + 1, took
    record(f"{name}: a body trickled in, answered 408 after (s)", took,
           f"header_timeout {HEADER_TIMEOUT}s, {length} bytes announced")
    assert await serving(server) == {"api": 200, "admin": 200, "metrics": 200, "agent": 200}


@pytest.mark.parametrize("name", POSTERS)
async def test_bodies_over_the_limit_are_413_in_the_envelope(server: Server, name: str) -> None:
    d = server.doors[name]
    r, w = await dial(d)
    # announced over the limit: refused on the announcement, before a byte of it is read
    w.write(d.head("POST", d.post or "/",
                   f"Content-Type: application/json\r\nContent-Length: {d.max_body + 1}") + b"\r\n")
    await w.drain()
    got = await answer(r, 10)
    w.close()
    assert got is not None and got[0] == 413, got
    in_envelope(d, got[2])
    # chunked, so no length is announced: cut off once it passes the limit
    r, w = await dial(d)
    w.write(d.head("POST", d.post or "/", "Content-Type: application/json\r\nTransfer-Encoding: chunked") + b"\r\n")
    chunk = b"x" * 65536
    got = None
    try:
        for _ in range(d.max_body // len(chunk) + 2):
            w.write(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
            await w.drain()
        w.write(b"0\r\n\r\n")
        await w.drain()
    except (ConnectionError, ssl.SSLError):
        pass
    got = await answer(r, 10)
    w.close()
    assert got is not None and got[0] == 413, got
    in_envelope(d, got[2])
    assert await serving(server) == {"api": 200, "admin": 200, "metrics": 200, "agent": 200}


@pytest.mark.parametrize("name", ALL)
async def test_headers_over_the_limits_are_refused(server: Server, name: str) -> None:
    d = server.doors[name]
    long_line = await ask(d, "GET", d.get, extra="X-Long: " + "a" * 9000)
    many = await ask(d, "GET", d.get, extra="\r\n".join(f"X-H{i}: a" for i in range(100)))
    assert long_line is not None and long_line[0] in (400, 431), long_line
    assert many is not None and many[0] in (400, 431), many
    assert await serving(server) == {"api": 200, "admin": 200, "metrics": 200, "agent": 200}


BAD_BODIES: dict[str, Callable[[], bytes]] = {
    "invalid UTF-8": lambda: b'{"model": "\xff\xfe", "name": "\xc3\x28"}',
    "nested 100,000 deep": lambda: b"[" * 100_000 + b"]" * 100_000,
    "an object nested 10,000 deep": lambda: b'{"a":' * 10_000 + b"1" + b"}" * 10_000,
}


@pytest.mark.parametrize("name", POSTERS)
async def test_invalid_utf8_and_deep_json_are_refused_in_the_envelope(server: Server, name: str) -> None:
    d = server.doors[name]
    keys_before = await asyncio.to_thread(lambda: len(_keys(server.p)))
    for what, body in BAD_BODIES.items():
        got = await ask(d, "POST", d.post or "/", body())
        assert got is not None and got[0] in (400, 422), (what, got)
        in_envelope(d, got[2])
    assert await asyncio.to_thread(lambda: len(_keys(server.p))) == keys_before  # nothing was made of them
    assert await serving(server) == {"api": 200, "admin": 200, "metrics": 200, "agent": 200}


def _keys(p: ClusterPlan) -> list[object]:
    from llmgw.dev.cluster import admin_get

    return list(admin_get(p, "/api/keys"))


@pytest.mark.parametrize("name", ALL)
async def test_two_thousand_idle_connections_hold_nothing_for_long(server: Server, name: str) -> None:
    """2,000 connections that never say a word (on the agent listener: never start TLS). On the API they come
    from 20 addresses, so the per-client cap is not what stops them. While they are open every listener serves
    its other clients (the operator included, though on loopback the operator's address is the attacker's);
    all of them are closed within the header timeout."""
    d = server.doors[name]
    plain = Door(d.name, d.port, local=d.local)  # no TLS: the handshake is what they never start
    conns: list[Streams] = []
    started = time.monotonic()
    twenty = [loopback() for _ in range(20)]
    for i in range(IDLE):
        local = twenty[i % 20] if name == "api" else "127.0.0.1"
        try:
            conns.append(await dial(plain, local))
        except OSError:
            pass
    opened = time.monotonic() - started
    assert len(conns) >= IDLE * 0.9, f"only {len(conns)} of {IDLE} connections could be opened"
    try:
        assert await serving(server) == {"api": 200, "admin": 200, "metrics": 200, "agent": 200}
        results = await asyncio.gather(*(closed(r, HEADER_TIMEOUT + MARGIN) for r, _ in conns))
        took = time.monotonic() - started
        assert all(results), f"{name}: {results.count(False)} of {len(conns)} idle connections still open"
        record(f"{name}: {IDLE} idle connections all closed after (s)", took,
               f"opened in {opened:.1f}s, header_timeout {HEADER_TIMEOUT}s")
    finally:
        for _, w in conns:
            w.close()
    assert await serving(server) == {"api": 200, "admin": 200, "metrics": 200, "agent": 200}
