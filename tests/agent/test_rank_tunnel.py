"""The tunnel between ranks (llama.cpp's RPC workers have no authentication): a worker's peer server is reached
only through mutual TLS with a node certificate of this cluster and the replica's secret. An echo server stands in
for ggml-rpc-server on the worker's loopback; leader and worker have loopback addresses of their own."""

from __future__ import annotations

import asyncio
import os
import ssl
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from bench.addresses import loopback

from llmgw.agent import tunnel
from llmgw.agent.engines.base import Launch, Loopback
from llmgw.agent.gate import loopback_ports
from llmgw.agent.gated import TlsFiles
from llmgw.agent.supervisor import Supervisor
from llmgw.core.clock import FakeClock
from llmgw.pki.ca import init_ca, issue
from llmgw.pki.tls import client_context, server_context
from llmgw.wire.messages import ShardSpec
from tests.agent.engine_sockets import gate_and_engine
from tests.harness import await_until, free_port

SECRET = "tunnel-secret-" + "z" * 30
LEADER, WORKER = loopback(), loopback()


@dataclass
class Tunnel:
    local: int  # on the leader's loopback
    exposed: int  # on the worker's address
    pki: Path


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while chunk := await reader.read(65536):
        writer.write(chunk)
        await writer.drain()
    writer.close()


def _ctx(pki: Path, node: str, server: bool) -> ssl.SSLContext:
    files = (pki / f"{node}.crt", pki / f"{node}.key", pki / "ca.crt")
    return server_context(*files, require_client=True) if server else client_context(*files)


@pytest.fixture
async def tunnelled(tmp_path: Path) -> AsyncIterator[Tunnel]:
    pki = tmp_path / "pki"
    init_ca(pki)
    issue(pki, "leader", ips=[LEADER])
    issue(pki, "worker", ips=[WORKER])
    engine_port, local = loopback_ports(2)
    exposed = free_port()
    servers = [
        await asyncio.start_server(_echo, "127.0.0.1", engine_port),
        await tunnel.serve_in(WORKER, exposed, engine_port, SECRET, _ctx(pki, "worker", server=True)),
        await tunnel.serve_out(local, WORKER, exposed, SECRET, _ctx(pki, "leader", server=False)),
    ]
    try:
        yield Tunnel(local, exposed, pki)
    finally:
        for s in servers:
            s.close()


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes) -> bytes:
    """Send `data`; whatever comes back before the other side closes or 3 s of silence."""
    writer.write(data)
    await writer.drain()
    got = b""
    try:
        while len(got) < len(data):
            async with asyncio.timeout(3):
                chunk = await reader.read(65536)
            if not chunk:
                break
            got += chunk
    except (TimeoutError, ConnectionError, ssl.SSLError):
        pass
    writer.close()
    return got


async def test_the_leader_reaches_the_worker_through_its_loopback_port(tunnelled: Tunnel) -> None:
    data = os.urandom(3 << 20)  # tensors are large: several MB both ways, whole and in order
    assert await _exchange(*await asyncio.open_connection("127.0.0.1", tunnelled.local), data) == data


async def test_the_worker_port_gives_nothing_to_a_plain_connection(tunnelled: Tunnel) -> None:
    got = await _exchange(*await asyncio.open_connection(WORKER, tunnelled.exposed), b"\x0e" + b"\0" * 64)
    assert got == b"" or not got.endswith(b"\0" * 64)  # (a TLS alert at most, never the engine's answer)


async def test_a_node_certificate_without_the_secret_gets_nothing(tunnelled: Tunnel) -> None:
    ctx = _ctx(tunnelled.pki, "leader", server=False)
    conn = await asyncio.open_connection(WORKER, tunnelled.exposed, ssl=ctx, server_hostname=WORKER)
    assert await _exchange(*conn, b"not-the-secret\nhello") == b""


async def test_the_secret_without_a_node_certificate_gets_nothing(tunnelled: Tunnel, tmp_path: Path) -> None:
    other = tmp_path / "other"
    init_ca(other)
    issue(other, "leader", ips=[LEADER])
    ctx = _ctx(other, "leader", server=False)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # even trusting whatever the worker shows
    try:
        conn = await asyncio.open_connection(WORKER, tunnelled.exposed, ssl=ctx)
    except (ssl.SSLError, ConnectionError):
        return  # refused at the handshake
    assert await _exchange(*conn, SECRET.encode() + b"\nhello") == b""


ECHO = ("import asyncio, sys\n"
        "async def echo(r, w):\n"
        "    while chunk := await r.read(65536):\n"
        "        w.write(chunk); await w.drain()\n"
        "    w.close()\n"
        "async def main():\n"
        "    s = await asyncio.start_server(echo, '127.0.0.1', int(sys.argv[1]))\n"
        "    await s.serve_forever()\n"
        "asyncio.run(main())\n")


@pytest.mark.real  # processes (tests/tiers.py)
async def test_supervised_ranks_talk_only_through_their_gates(tmp_path: Path) -> None:
    """As agents run them: each shard's gate process opens its end of the tunnel from the node's certificate, the
    worker's stand-in engine listens on loopback only, and the leader's reaches it through its own loopback port."""
    pki = tmp_path / "pki"
    init_ca(pki)
    issue(pki, "leader", ips=[LEADER])
    issue(pki, "worker", ips=[WORKER])
    exposed = free_port()
    spec = ShardSpec(replica_id="r", model="m", engine="llamacpp", source="org/m", rank=0, world_size=2,
                     peer_addresses=[LEADER, WORKER], peer_ports=[0, exposed], api_key=SECRET)
    local: list[int] = []

    def resolve(s: ShardSpec, ports: Loopback) -> tuple[Launch | None, str]:
        if s.rank == 1:  # (ggml-rpc-server's part, played by an echo server)
            return Launch(argv=[sys.executable, "-c", ECHO, str(ports.engine)], tunnel_in=(exposed, ports.engine)), ""
        local.append(ports.peers[1])
        return Launch(argv=["sleep", "60"], tunnels_out=((ports.peers[1], WORKER, exposed),)), ""

    def tls(node: str) -> TlsFiles:
        return TlsFiles(str(pki / f"{node}.crt"), str(pki / f"{node}.key"), str(pki / "ca.crt"))

    worker = Supervisor(FakeClock(), tmp_path / "w", WORKER, resolve, tls=tls("worker"))
    leader = Supervisor(FakeClock(), tmp_path / "l", LEADER, resolve, tls=tls("leader"))
    try:
        await worker.converge([spec.model_copy(update={"rank": 1})])
        await leader.converge([spec])

        async def exchanged() -> bool:
            try:
                conn = await asyncio.open_connection("127.0.0.1", local[0])
            except OSError:
                return False
            return await _exchange(*conn, b"hello rpc") == b"hello rpc"

        await await_until(exchanged, 20, "the leader's loopback port reaching the worker's engine")
        pid = worker.states()[0].pid
        assert pid is not None
        gate, behind = gate_and_engine(pid)
        assert gate == {(WORKER, exposed)} and behind == {"127.0.0.1"}, (gate, behind)
    finally:
        await leader.close()
        await worker.close()
