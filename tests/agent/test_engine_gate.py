"""The agent's gate in front of an engine: the replica's secret on every path and every request of a kept-alive
connection, bodies streamed both ways as they come, and a dead engine said to be unreached (the router may go
elsewhere). Real sim engines on loopback, the gate on another loopback address as a node's address would be."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import aiohttp
import pytest
from aiohttp import web
from bench.addresses import loopback

from llmgw.agent.engines import ADAPTERS, Launch, LaunchContext
from llmgw.agent.engines.base import Loopback
from llmgw.agent.gate import EngineGate, loopback_ports
from llmgw.agent.supervisor import Supervisor
from llmgw.agent.supervisor.adopt import find_running
from llmgw.core.clock import FakeClock
from llmgw.core.errors import ConnectFailed
from llmgw.router.proxy import Attempt, Timeouts, forward
from llmgw.wire.messages import UNREACHED_HEADER, ShardSpec
from tests.agent.engine_sockets import gate_and_engine, listening
from tests.harness import await_until, free_port

pytestmark = pytest.mark.real  # processes: the unit tier leaves this file out (tests/tiers.py)

SECRET = "gate-secret-" + "y" * 32
NODE = loopback()  # the node's address: not the engine's loopback one
PATHS = ["/health", "/metrics", "/v1/models", "/props", "/tokenize", "/pooling", "/invocations", "/nope"]


def sim_at_port(s: ShardSpec, ports: Loopback) -> tuple[Launch | None, str]:
    """The sim engine behind the gate, told no key: it answers anyone who reaches it, as vLLM does outside /v1, so
    only the gate's own check can refuse (given the secret too, it refused for the gate and a gate checking
    nothing, or any bearer, went unnoticed)."""
    ctx = LaunchContext(binary=sys.executable, model_path="org/m", host=NODE, serve_port=ports.engine)
    return ADAPTERS["sim"].launch(s.model_copy(update={"api_key": ""}), ctx), ""


@pytest.fixture
async def gated(tmp_path: Path) -> AsyncIterator[tuple[Supervisor, str]]:
    port = free_port()
    spec = ShardSpec(replica_id="r1", model="m", engine="sim", source="org/m", rank=0, world_size=1, serve_port=port,
                     api_key=SECRET, args=["--tokens", "12", "--tokens-per-second", "12"])
    sup = Supervisor(FakeClock(), tmp_path, NODE, sim_at_port)
    await sup.converge([spec])

    async def ready() -> bool:
        await sup.tick()
        return sup.states()[0].state == "ready"

    try:
        await await_until(ready, 30, "sim ready behind its gate")
        yield sup, f"http://{NODE}:{port}"
    finally:
        await sup.close()


async def test_only_loopback_has_the_engine_and_the_gate_wants_the_secret_on_every_path(
        gated: tuple[Supervisor, str]) -> None:
    sup, url = gated
    pid = sup.states()[0].pid
    assert pid is not None
    gate, behind = gate_and_engine(pid)
    assert gate == {(NODE, int(url.rsplit(":", 1)[1]))} and behind == {"127.0.0.1"}, listening(pid)
    async with aiohttp.ClientSession() as http:
        for path in PATHS:
            for method in ("GET", "POST"):
                async with http.request(method, url + path, json={} if method == "POST" else None) as r:
                    assert r.status == 401, (method, path, r.status)
                async with http.request(method, url + path, headers={"Authorization": "Bearer wrong"}) as r:
                    assert r.status == 401, (method, path, r.status)
        async with http.get(url + "/v1/models", headers={"Authorization": f"Bearer {SECRET}"}) as r:
            assert r.status == 200 and (await r.json())["data"][0]["id"] == "m"


async def test_each_request_of_a_kept_alive_connection_is_checked(gated: tuple[Supervisor, str]) -> None:
    """A keyed request, then keyless ones on the same connection (pipelined): each is refused on its own."""
    _, url = gated
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    keyed = f"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {SECRET}\r\n\r\n"
    keyless = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    writer.write((keyed + keyless + keyless).encode())
    await writer.drain()
    try:
        got = await asyncio.wait_for(reader.read(), 10)  # the gate closes after its refusal
    finally:
        writer.close()
    statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", got)
    assert statuses == [b"200", b"401"], got[:2000]


async def test_an_event_stream_passes_chunk_by_chunk(gated: tuple[Supervisor, str]) -> None:
    """12 tokens at 12 a second: the first arrives about a second before the last, not with it."""
    _, url = gated
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    arrivals = []
    async with aiohttp.ClientSession() as http, http.post(
            url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {SECRET}"}) as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/event-stream")
        async for line in r.content:
            if line.startswith(b"data: {"):
                arrivals.append(time.monotonic())
    assert len(arrivals) >= 12
    assert arrivals[-1] - arrivals[0] > 0.5, arrivals


async def test_a_request_to_a_dead_engine_is_unreached_and_the_router_may_go_elsewhere() -> None:
    port = free_port()
    gate = EngineGate(SECRET, f"http://127.0.0.1:{loopback_ports(1)[0]}")  # nothing listens there
    await gate.open(NODE, port)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(f"http://{NODE}:{port}/v1/completions", json={},
                                 headers={"Authorization": f"Bearer {SECRET}"}) as r:
                assert r.status == 502 and r.headers.get(UNREACHED_HEADER) == "1"
            with pytest.raises(ConnectFailed):  # (forward reads the request only to stream an answer to it)
                await forward(Attempt(cast(web.Request, None), http, f"http://{NODE}:{port}/v1/completions", b"{}",
                                      False, Timeouts(connect=2, first_byte=5, between_chunks=5), None, SECRET))
    finally:
        await gate.close()


async def test_the_engine_hears_the_router_leave(tmp_path: Path) -> None:
    """A client that goes away mid-stream is gone for the engine too: it stops generating for nobody."""
    closed = asyncio.Event()

    async def slow(request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        try:
            for _ in range(600):
                await out.write(b"data: {}\n\n")
                await asyncio.sleep(0.05)
        except ConnectionError:
            closed.set()
        return out

    app = web.Application()
    app.router.add_post("/v1/chat/completions", slow)
    runner = web.AppRunner(app)
    await runner.setup()
    engine_port = loopback_ports(1)[0]
    await web.TCPSite(runner, "127.0.0.1", engine_port).start()
    port = free_port()
    gate = EngineGate(SECRET, f"http://127.0.0.1:{engine_port}")
    await gate.open(NODE, port)
    try:
        async with aiohttp.ClientSession() as http:
            r = await http.post(f"http://{NODE}:{port}/v1/chat/completions", json={},
                                headers={"Authorization": f"Bearer {SECRET}"})
            await r.content.readline()
            r.close()
        await asyncio.wait_for(closed.wait(), 10)
    finally:
        await gate.close()
        await runner.cleanup()


async def _drops_after_streams(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """An engine that, like llama-server, keeps its connection after a JSON answer but not after a streamed one,
    without saying so (unless asked to close it): whatever is sent on it after a stream is dropped unanswered."""
    streamed = False
    event = b'data: {"a": 1}\n\n'
    while True:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            break
        length = re.search(rb"(?i)content-length: *(\d+)", head)
        body = await reader.readexactly(int(length.group(1)) if length else 0)
        if streamed:
            break
        closing = b"connection: close" in head.lower()
        if b'"stream"' in body:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
                         + (b"Connection: close\r\n" if closing else b"") + b"\r\n"
                         + f"{len(event):x}\r\n".encode() + event + b"\r\n0\r\n\r\n")
            streamed = True
        else:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
        await writer.drain()
    writer.close()


async def test_a_connection_that_carried_a_stream_is_not_used_again() -> None:
    """The router asks for a stream to such an engine with `Connection: close` (its shard says the engine drops
    connections after streams): the gate's connection to the engine ends with it too."""
    engine_port, port = loopback_ports(2)
    server = await asyncio.start_server(_drops_after_streams, "127.0.0.1", engine_port)
    gate = EngineGate(SECRET, f"http://127.0.0.1:{engine_port}")
    await gate.open(NODE, port)
    key = {"Authorization": f"Bearer {SECRET}"}
    try:
        async with aiohttp.ClientSession() as http:
            for body in ({}, {"stream": True}, {}, {"stream": True}, {}):
                said = {**key, "Connection": "close"} if body else key
                async with http.post(f"http://{NODE}:{port}/v1/chat/completions", json=body, headers=said) as r:
                    assert r.status == 200, (body, r.status, await r.text())
                    await r.read()
    finally:
        await gate.close()
        server.close()


async def test_the_engine_dies_with_its_gate(gated: tuple[Supervisor, str]) -> None:
    """However the gate goes (SIGKILL included), its engine goes too: no engine is left listening for nobody."""
    sup, _ = gated
    pid = sup.states()[0].pid
    assert pid is not None
    engines = [p for p in listening(pid) if p != pid]
    assert engines, listening(pid)
    os.kill(pid, signal.SIGKILL)
    await await_until(lambda: _now(not any(Path(f"/proc/{p}").exists() and _running(p) for p in engines)), 10,
                      "the engine gone with its gate")


async def test_an_engine_left_by_an_agent_before_gates_is_restarted_not_adopted(tmp_path: Path) -> None:
    """Its pid file records no loopback port: it listens on the network itself, and is replaced by a gated one."""
    port = free_port()
    spec = ShardSpec(replica_id="r1", model="m", engine="sim", source="org/m", rank=0, world_size=1, serve_port=port,
                     api_key=SECRET)
    old = Supervisor(FakeClock(), tmp_path, NODE, lambda s, _: sim_at_port(s, Loopback()))  # as before gates
    await old.converge([spec])
    pid = old.shards[("r1", 0)].proc.pid  # type: ignore[union-attr]
    (pid_file,) = tmp_path.glob("*.pid")
    pid_file.write_text(" ".join(pid_file.read_text().split()[:2]) + "\n")  # the old format: pid and identity
    old.shards.clear()  # the old agent is gone; its engine runs on
    await old.close()
    new = Supervisor(FakeClock(), tmp_path, NODE, sim_at_port)
    try:
        new.adopt(find_running(tmp_path))
        assert new.shards == {}
        await await_until(lambda: _now(not _running(pid)), 10, "the old engine stopped")
    finally:
        if _running(pid):
            os.killpg(pid, signal.SIGKILL)
        await new.close()


async def _now(v: bool) -> bool:
    return v


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


async def test_the_engine_gets_the_headers_the_router_sent_and_no_others() -> None:
    seen: list[dict[str, str]] = []

    async def echo(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.json_response({})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", echo)
    runner = web.AppRunner(app)
    await runner.setup()
    engine_port, port = loopback_ports(2)
    await web.TCPSite(runner, "127.0.0.1", engine_port).start()
    gate = EngineGate(SECRET, f"http://127.0.0.1:{engine_port}")
    await gate.open(NODE, port)
    try:
        reader, writer = await asyncio.open_connection(NODE, port)
        writer.write(f"POST /v1/x?a=1 HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer {SECRET}\r\nX-Mine: 1\r\n"
                     f"Content-Length: 2\r\n\r\n{{}}".encode())
        await writer.drain()
        assert (await reader.readline()).startswith(b"HTTP/1.1 200")
        writer.close()
        (got,) = seen
        assert {k.lower() for k in got} <= {"host", "authorization", "x-mine", "content-length"}, got
        assert got["X-Mine"] == "1" and got["Authorization"] == f"Bearer {SECRET}"
    finally:
        await gate.close()
        await runner.cleanup()
