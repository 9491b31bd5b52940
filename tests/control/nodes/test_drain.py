"""Drain: a replica told to stop leaves the routing table at once, and its shards stay in its node's desired state
while routers have requests on it, up to drain_timeout after the stop; then the agent is told to stop them."""

from __future__ import annotations

from pathlib import Path

from llmgw.config.server import ServerConfig, TLSFiles
from llmgw.control.activity.activity import LOCAL
from llmgw.control.nodes.desired import draining
from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.core.conditions import ConditionType, Status, set_condition
from llmgw.core.reasons import Reason
from llmgw.reconcile import transitions
from llmgw.reconcile.status import stopped
from llmgw.records.state import ReplicaRecord, ShardAssignment
from llmgw.store.sqlite import SqliteStore
from tests.clusters import model, node

T0 = 1_800_000_000.0


def replica(stop_at: float | None) -> ReplicaRecord:
    ready = set_condition([], ConditionType.Ready, Status.TRUE, Reason.AllShardsReady, "", T0)
    r = ReplicaRecord(id="m-1", model="m", created_at=T0, shards_expected=1, conditions=ready,
                      endpoint="http://10.0.0.1:20000", secret="s" * 64,
                      assignments=[ShardAssignment(rank=0, node_id="n1", address="10.0.0.1", gpus=[0, 1, 2, 3],
                                                   serve_port=20000)])
    return stopped(r, Reason.Idle, "unused for 700s", stop_at) if stop_at is not None else r


def test_the_rule() -> None:
    r = replica(stop_at=T0)
    assert draining([r], {"m-1": 1}, T0 + 59, 60.0) == {"m-1"}
    assert draining([r], {"m-1": 1}, T0 + 60, 60.0) == set()  # past the timeout
    assert draining([r], {}, T0 + 1, 60.0) == set()  # nothing in flight: stopped at once
    assert draining([replica(stop_at=None)], {"m-1": 1}, T0, 60.0) == set()  # not stopping: not draining
    failed = transitions.failed(r, Reason.ShardFailed, "rank 0 failed", T0)
    assert failed.failed
    assert draining([failed], {"m-1": 1}, T0, 60.0) == set()


def test_a_stopping_replica_keeps_its_shards_while_requests_finish(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db").open()
    store.put_replica(replica(stop_at=T0))
    cfg = ServerConfig(tls=TLSFiles(ca="x", cert="x", key="x"), models=[model("m", min_=0, max_=1)],
                       drain_timeout=60.0)
    clock = FakeClock(T0)
    p = ControlPlane(cfg, store, clock)
    p.load()
    report = node("n1", address="10.0.0.1").report
    assert p.registry.ready_table().get("m", []) == []  # out of the routing table: no new request reaches it
    p.activity.in_flight(LOCAL, {"m-1": 1}, whole=False)  # a long stream still on it
    assert [s.replica_id for s in p.heartbeats.heartbeat(report).shards] == ["m-1"]
    clock.advance(30)
    assert [s.replica_id for s in p.heartbeats.heartbeat(report).shards] == ["m-1"]
    p.activity.in_flight(LOCAL, {"m-1": 0}, whole=False)  # it finished
    assert p.heartbeats.heartbeat(report).shards == []
    p.activity.in_flight(LOCAL, {"m-1": 1}, whole=False)
    clock.advance(31)  # 61 s after the stop: whatever is left is cut
    assert p.heartbeats.heartbeat(report).shards == []


def test_the_ready_table_says_what_the_leading_shard_says_of_its_engines_connections(tmp_path: Path) -> None:
    from llmgw.wire.messages import ShardState

    store = SqliteStore(tmp_path / "s.db").open()
    store.put_replica(replica(stop_at=None))
    cfg = ServerConfig(tls=TLSFiles(ca="x", cert="x", key="x"), models=[model("m", min_=0, max_=1)])
    p = ControlPlane(cfg, store, FakeClock(T0))
    p.load()
    (ready,) = p.registry.ready_table()["m"]
    assert not ready.closes_after_stream and ready.slots is None  # nothing reported yet
    shard = ShardState(replica_id="m-1", rank=0, state="ready", closes_after_stream=True, slots=1)
    p.heartbeats.heartbeat(node("n1", address="10.0.0.1", shards=[shard]).report)
    (ready,) = p.registry.ready_table()["m"]
    assert ready.closes_after_stream and ready.slots == 1
