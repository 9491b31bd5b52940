"""Found by an attack review: heartbeats.heartbeat() kicks a reconcile pass whenever the raw list of (replica, rank,
state) a node reports differs from its last, including shards of replicas that do not exist or are not placed on it.
A node may only affect its own state; here it sets the pace of every pass (up to one per KICKED_PASS_GAP_S, 20/s,
instead of one per reconcile_interval), by flipping a made-up shard's state in each heartbeat its rate limit allows."""

from __future__ import annotations

from pathlib import Path

from llmgw.config.server import ServerConfig, TLSFiles
from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.store.sqlite import SqliteStore
from llmgw.wire.messages import ShardState
from tests.clusters import node


def test_a_shard_that_is_not_the_nodes_does_not_kick_a_pass(tmp_path: Path) -> None:
    cfg = ServerConfig(tls=TLSFiles(ca="x", cert="x", key="x"), models=[])
    plane = ControlPlane(cfg, SqliteStore(tmp_path / "s.db").open(), FakeClock())
    plane.load()
    report = node("node01").report
    plane.heartbeats.heartbeat(report)
    assert plane.passes.take_kick(), "a node heard from for the first time is worth a pass"
    kicks = 0
    for i in range(10):
        bogus = ShardState(replica_id="no-such-replica", rank=0, state="ready" if i % 2 else "starting")
        plane.heartbeats.heartbeat(report.model_copy(update={"shards": [bogus]}))
        kicks += plane.passes.take_kick()
    assert kicks == 0, f"{kicks} of 10 heartbeats kicked a pass for a shard of a replica that does not exist"
