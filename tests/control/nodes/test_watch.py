"""An agent's watch: the digest of the shards a node is to run, and a wait that ends when it changes (over real
mutual TLS, against a real control plane whose passes the test runs)."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from bench.addresses import loopback

from llmgw.config.loader import load
from llmgw.config.server import ServerConfig
from llmgw.control.http.agent_api import agent_app
from llmgw.control.nodes.watch import EMPTY, Watch, shard_digests
from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.core.reasons import Reason
from llmgw.dev.cluster import NodePlan
from llmgw.pki.tls import client_context, server_context
from llmgw.records.state import ReplicaRecord, ShardAssignment, StopRequest
from llmgw.store.sqlite import SqliteStore
from tests.clusters import node
from tests.harness import await_until, free_port, plan

HOST_A = loopback()  # the address this module's tests name (bench/addresses.py)


def replica(rid: str, *nodes: str, **kw: object) -> ReplicaRecord:
    shards = [ShardAssignment(node_id=n, rank=i, gpus=[0], address="10.0.0.1", serve_port=9000 + i)
              for i, n in enumerate(nodes)]
    return ReplicaRecord(id=rid, model="m", created_at=0.0, shards_expected=len(nodes), assignments=shards,
                         **kw)  # type: ignore[arg-type]


def test_a_nodes_digest_changes_with_its_own_shards_only() -> None:
    before = shard_digests([replica("r1", "a")])
    after = shard_digests([replica("r1", "a"), replica("r2", "b", "c")])
    assert after["a"] == before["a"]  # nothing of a's changed
    assert set(after) == {"a", "b", "c"} and after["b"] != after["c"]
    stopping = replica("r2", "b", "c", stop=StopRequest(reason=Reason.Idle, message="idle", at=0.0))
    gone = shard_digests([replica("r1", "a"), stopping])
    assert "b" not in gone  # told to stop: nothing left to run there
    assert shard_digests([replica("r1", "a", failed=True)]) == {}


async def test_a_wait_ends_on_a_change_and_a_nodes_second_wait_ends_its_first() -> None:
    w = Watch()
    first = asyncio.create_task(w.wait("a", 30))
    await await_until(lambda: w.waiting() == 1, 5, "a waiting")
    second = asyncio.create_task(w.wait("a", 30))
    await asyncio.wait_for(first, 5)  # superseded: a node holds one wait at most
    assert not second.done()
    w.changed()
    await asyncio.wait_for(second, 5)
    w.close()
    await asyncio.wait_for(w.wait("a", 30), 5)  # closed: answered at once


@contextlib.asynccontextmanager
async def agent_door(tmp_path: Path) -> AsyncIterator[tuple[ControlPlane, str, Path]]:
    model = {"name": "m", "source": "org/m", "engine": "sim", "scaling": {"min": 1, "max": 1},
             "profile": {"gpus_per_shard": 8, "gpu_class": "H100-80G"}}
    p = plan(tmp_path, [NodePlan(id="node01", address=HOST_A), NodePlan(id="node02", address=loopback())],
             [model])
    plane = ControlPlane(load(ServerConfig, p.workdir / "server.yaml"), SqliteStore(tmp_path / "s.db").open(),
                         FakeClock())
    plane.load()
    pki = p.workdir / "pki"
    runner = web.AppRunner(agent_app(plane.registry, plane.heartbeats, plane.credentials), shutdown_timeout=0.5)
    await runner.setup()
    port = free_port()
    tls = server_context(pki / "controlplane.crt", pki / "controlplane.key", pki / "ca.crt", require_client=True)
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=tls).start()
    try:
        yield plane, f"https://127.0.0.1:{port}/v1/agent/watch", pki
    finally:
        plane.registry.watch.close()
        await runner.cleanup()


def as_node(pki: Path, name: str) -> ssl.SSLContext:
    return client_context(pki / f"{name}.crt", pki / f"{name}.key", pki / "ca.crt")


async def watch(url: str, tls: ssl.SSLContext, seen: str) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as s, s.get(url, params={"seen": seen}, ssl=tls) as r:
        return r.status, await r.json()


async def test_a_watch_answers_when_a_shard_is_placed_on_its_node_and_not_before(tmp_path: Path) -> None:
    async with agent_door(tmp_path) as (plane, url, pki):
        status, body = await watch(url, as_node(pki, "node01"), "")
        assert status == 200 and body["digest"] == EMPTY  # differs from what it had seen (nothing): at once
        held = asyncio.create_task(watch(url, as_node(pki, "node01"), EMPTY))
        other = asyncio.create_task(watch(url, as_node(pki, "node02"), EMPTY))
        await await_until(lambda: plane.registry.watch.waiting() == 2, 10, "both nodes waiting")
        plane.heartbeats.heartbeat(node("node01", address=HOST_A).report)
        plane.passes.reconcile_once()  # places the min-1 model on node01, the only node with room
        assert [a.node_id for r in plane.registry.replicas.values() for a in r.assignments] == ["node01"]
        status, body = await asyncio.wait_for(held, 10)
        assert status == 200 and body["digest"] == plane.registry.node_digest("node01") != EMPTY
        await await_until(lambda: plane.registry.watch.waiting() == 1, 10,
                         "node02 waiting again: its shards did not change")
        assert not other.done()
        plane.registry.watch.close()
        assert (await asyncio.wait_for(other, 10))[1]["digest"] == EMPTY


async def test_a_revoked_node_may_not_watch(tmp_path: Path) -> None:
    async with agent_door(tmp_path) as (plane, url, pki):
        await plane.revoke("node02", "", "stolen")
        status, body = await watch(url, as_node(pki, "node02"), "")
        assert status == 403 and body["error"] == "node node02 is revoked: stolen"
