"""Requests in flight are summed over every router process, and a replica is busy from a request's start."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
from aiohttp import web

from llmgw.api.router import ActivityReport
from llmgw.config.server import ServerConfig, TLSFiles
from llmgw.control.activity.activity import LOCAL, REPORTER_SILENT_AFTER
from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.core.reasons import Reason
from llmgw.store.sqlite import SqliteStore
from llmgw.wire.messages import ShardState
from tests.clusters import model, node
from tests.harness import plane_in
from tests.router.conftest import router_over


def test_a_replica_busy_in_one_worker_stays_busy_whatever_the_others_report(tmp_path: Path) -> None:
    """The defect: each worker's report overwrote the others' counts (`outstanding.update`), so a replica busy in
    one worker looked idle to eviction as soon as another worker reported none on it."""
    p = plane_in(tmp_path)
    p.activity.in_flight("worker-1", {"r": 1}, whole=True)
    p.activity.in_flight("worker-2", {"r": 0, "s": 2}, whole=True)
    p.activity.in_flight(LOCAL, {"r": 1}, whole=False)
    assert p.activity.outstanding() == {"r": 2, "s": 2}
    p.activity.in_flight("worker-1", {}, whole=True)  # its request ended
    assert p.activity.outstanding() == {"r": 1, "s": 2}
    assert p.passes.world().outstanding == {"r": 1, "s": 2}
    assert isinstance(p.clock, FakeClock)
    p.clock.advance(REPORTER_SILENT_AFTER + 1)  # worker-2 died: its counts go with it; ours stay
    assert p.activity.outstanding() == {"r": 1}


async def test_a_replica_is_busy_from_the_start_of_a_request_not_its_end(tmp_path: Path) -> None:
    gate = asyncio.Event()
    started = asyncio.Event()

    async def slow(_: web.Request) -> web.Response:
        started.set()
        await gate.wait()
        return web.json_response({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", slow)
    async with router_over(tmp_path, app) as b:
        async with aiohttp.ClientSession() as s:
            req = asyncio.ensure_future(s.post(
                f"{b.url}/v1/chat/completions", json={"model": "sim-a", "messages": []},
                headers={"Authorization": f"Bearer {b.key}"}))
            await asyncio.wait_for(started.wait(), 10)
            assert b.state.outstanding == {"sim-a-1": 1}, "told the control plane only at the end"
            gate.set()
            resp = await req
            assert resp.status == 200
            resp.release()
        assert b.state.outstanding == {}


def test_with_two_api_workers_a_replica_busy_in_one_is_never_evicted(tmp_path: Path) -> None:
    """Two router processes report their whole in-flight tables, one after the other, through the activity route's
    operation. The replica busy in the first must stay busy after the second says it has nothing in flight."""
    a = model("a", gpus_per_shard=8, min_=0, max_=1, idle=3600)
    b = model("b", gpus_per_shard=8, min_=0, max_=1, idle=3600)
    clock = FakeClock()
    cfg = ServerConfig(tls=TLSFiles(ca="x", cert="x", key="x"), models=[a, b])
    p = ControlPlane(cfg, SqliteStore(tmp_path / "s.db").open(), clock)
    p.load()
    n1 = node("n1", n_gpus=8).report

    def beat(*ready: str) -> None:
        shards = [ShardState(replica_id=rid, rank=0, state="ready", endpoint="http://10.0.0.1:20000") for rid in ready]
        p.heartbeats.heartbeat(n1.model_copy(update={"shards": shards}))

    beat()
    p.activity.record_activity(ActivityReport(reporter="worker-1", demand={"a": clock.now()}))
    p.passes.reconcile_once()
    (ra,) = p.registry.replicas.values()
    beat(ra.id)
    p.passes.reconcile_once()
    assert p.registry.replicas[ra.id].ready
    p.activity.record_activity(ActivityReport(reporter="worker-1", used={ra.id: clock.now()}, outstanding={ra.id: 1}))
    clock.advance(cfg.eviction.protect_after_ready + cfg.eviction.idle_after + 1)  # idle by its last use, long up
    beat(ra.id)
    p.activity.record_activity(ActivityReport(reporter="worker-1", outstanding={ra.id: 1}))  # a long stream, going on
    p.activity.record_activity(ActivityReport(reporter="worker-2", demand={"b": clock.now()}, outstanding={}))
    for _ in range(3):
        p.passes.reconcile_once()
        assert p.registry.replicas[ra.id].stop is None, "evicted while a request was in flight in worker-1"
    p.activity.record_activity(ActivityReport(reporter="worker-1", outstanding={}))  # the stream ended
    p.passes.reconcile_once()
    stop = p.registry.replicas[ra.id].stop
    assert stop is not None and stop.reason == Reason.Evicted and stop.for_model == "b"
