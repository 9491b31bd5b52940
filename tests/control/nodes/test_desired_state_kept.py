"""A node's desired state is kept between renewals and derived again as soon as anything it is derived from moves:
one test per input (a real control plane over SQLite, a fake clock)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from llmgw.config.server import ModelSpec, ServerConfig, TLSFiles
from llmgw.control.activity.activity import LOCAL
from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.core.reasons import Reason
from llmgw.reconcile.status import stopped
from llmgw.records.state import ReplicaRecord, ShardAssignment
from llmgw.store.sqlite import SqliteStore
from llmgw.wire.messages import DesiredState, NodeReport
from llmgw.wire.renewal import Renewal, RenewalAnswer
from tests.clusters import model, node
from tests.control.hub.test_hub_models_in_plane import COMMIT, Hub

T0 = 1_800_000_000.0
URL = "https://models.example/m.gguf"


def plane(tmp_path: Path, *models: ModelSpec, hub: Hub | None = None) -> ControlPlane:
    cfg = ServerConfig(tls=TLSFiles(ca="x", cert="x", key="x"), models=list(models), drain_timeout=60.0)
    p = ControlPlane(cfg, SqliteStore(tmp_path / "s.db").open(), FakeClock(T0), resolver=hub)
    p.load()
    return p


def replica(rid: str, model_name: str, node_id: str) -> ReplicaRecord:
    return ReplicaRecord(id=rid, model=model_name, created_at=T0, shards_expected=1, secret="s" * 64, assignments=[
        ShardAssignment(rank=0, node_id=node_id, address="10.0.0.1", gpus=[], serve_port=20000)])


def report(node_id: str, fabric: str | None = None, holds: bool = False) -> NodeReport:
    r = node(node_id, fabric=fabric, weights=(URL,) if holds else (), address="10.0.0.1").report
    return r.model_copy(update={"peer_port": 7480})


def renewed(p: ControlPlane, d: DesiredState) -> DesiredState | None:
    got = p.heartbeats.renew(Renewal(node_id=d.node_id, token=d.renewal_token, etag=d.etag, loads=[]), "", None)
    assert not got.why, got.why
    return RenewalAnswer.model_validate_json(got.answer).desired


def shards(d: DesiredState | None) -> list[str]:
    assert d is not None, "the renewal was answered 'unchanged'"
    return [f"{s.replica_id}:{s.source}" for s in d.shards]


def test_a_renewal_of_an_unchanged_node_is_answered_unchanged(tmp_path: Path) -> None:
    p = plane(tmp_path, model("m", min_=0))
    d = p.heartbeats.heartbeat(report("n1"))
    assert renewed(p, d) is None and renewed(p, d) is None


def test_replicas(tmp_path: Path) -> None:
    p = plane(tmp_path, model("m", min_=0))
    d = p.heartbeats.heartbeat(report("n1"))
    p.registry.replicas_from_store([replica("m-1", "m", "n1")])
    assert shards(renewed(p, d)) == ["m-1:/models/m"]


def test_the_catalog(tmp_path: Path) -> None:
    p = plane(tmp_path, model("m", min_=0))
    p.registry.replicas_from_store([replica("m2-1", "m2", "n1")])  # a model the catalog does not name yet
    d = p.heartbeats.heartbeat(report("n1"))
    assert d.shards == []
    p.registry.start(T0, [model("m", min_=0), model("m2", min_=0, source="/models/m2")], [])
    assert shards(renewed(p, d)) == ["m2-1:/models/m2"]


def test_revocations(tmp_path: Path) -> None:
    p = plane(tmp_path, model("m", min_=0))
    d = p.heartbeats.heartbeat(report("n1"))
    asyncio.run(p.revoke("n9", "", "decommissioned"))
    got = renewed(p, d)
    assert got is not None and got.revoked == ["n9"]


def test_a_hub_resolution(tmp_path: Path) -> None:
    hub = Hub()
    hub.failing = None
    p = plane(tmp_path, model("m", source="hf://org/m@main", gpus_per_shard=0, cls=None, min_=0), hub=hub)
    p.registry.replicas_from_store([replica("m-1", "m", "n1")])
    d = p.heartbeats.heartbeat(report("n1"))
    asyncio.run(p.hub_models.tick(p.registry.models))
    assert shards(renewed(p, d)) == [f"m-1:hf://org/m@{COMMIT}"]


def test_the_other_nodes_of_a_fabric_for_a_fetched_file(tmp_path: Path) -> None:
    remote = model("m", source=URL, gpus_per_shard=0, cls=None, min_=0)
    p = plane(tmp_path, remote.model_copy(update={"sha256": "ab" * 32, "size": 1000}))
    p.registry.replicas_from_store([replica("m-1", "m", "n1")])
    p.heartbeats.heartbeat(report("n3", fabric="ib-a"))
    d = p.heartbeats.heartbeat(report("n1", fabric="ib-a"))
    (shard,) = d.shards
    assert shard.weights is not None and not shard.weights.peers
    # n3 (running nothing of it, so choosing no fetcher) has the file now: n1 copies it from n3
    p.heartbeats.heartbeat(report("n3", fabric="ib-a", holds=True))
    got = renewed(p, d)
    assert got is not None and got.shards[0].weights is not None
    assert [x.node_id for x in got.shards[0].weights.peers] == ["n3"]


def test_a_draining_replica(tmp_path: Path) -> None:
    p = plane(tmp_path, model("m", min_=0))
    p.registry.replicas_from_store([stopped(replica("m-1", "m", "n1"), Reason.Idle, "unused", T0)])
    p.activity.in_flight(LOCAL, {"m-1": 1}, whole=False)  # a stream still on it: it drains
    d = p.heartbeats.heartbeat(report("n1"))
    assert [s.replica_id for s in d.shards] == ["m-1"]
    assert renewed(p, d) is None
    p.activity.in_flight(LOCAL, {"m-1": 0}, whole=False)  # it finished: no version moved, yet the shard goes
    got = renewed(p, d)
    assert got is not None and got.shards == []
