"""A node's engine gauges steer routing only for the replicas it leads: gauges it sends, in a full report or a
renewal, for a replica whose leading shard is another node's are ignored (a real control plane over SQLite)."""

from __future__ import annotations

from pathlib import Path

from llmgw.wire.messages import EngineLoad, ShardState
from llmgw.wire.renewal import Renewal, ShardLoad
from tests.clusters import model
from tests.control.nodes.test_desired_state_kept import plane, replica, report

BUSY = EngineLoad(running=0.0, waiting=0.0, kv_cache_usage=0.0, at=1.0)


def test_a_renewal_names_no_gauges_of_a_replica_another_node_leads(tmp_path: Path) -> None:
    p = plane(tmp_path, model("m", min_=0))
    p.registry.replicas_from_store([replica("m-2", "m", "n2")])
    d = p.heartbeats.heartbeat(report("n1"))
    got = p.heartbeats.renew(Renewal(node_id="n1", token=d.renewal_token, etag=d.etag,
                                   loads=[ShardLoad(replica_id="m-2", rank=0, load=BUSY)]), "", None)
    assert not got.why, got.why
    assert "m-2" not in p.activity.engine_loads, "node n1 set the gauges routers weigh n2's replica by"


def test_a_full_report_names_no_gauges_of_a_replica_another_node_leads(tmp_path: Path) -> None:
    p = plane(tmp_path, model("m", min_=0))
    p.registry.replicas_from_store([replica("m-2", "m", "n2")])
    theirs = ShardState(replica_id="m-2", rank=0, state="ready", load=BUSY)
    p.heartbeats.heartbeat(report("n1").model_copy(update={"shards": [theirs]}))
    assert "m-2" not in p.activity.engine_loads, "node n1 set the gauges routers weigh n2's replica by"


def test_the_leading_node_still_sets_its_replicas_gauges(tmp_path: Path) -> None:
    p = plane(tmp_path, model("m", min_=0))
    p.registry.replicas_from_store([replica("m-2", "m", "n2")])
    d = p.heartbeats.heartbeat(report("n2"))
    got = p.heartbeats.renew(Renewal(node_id="n2", token=d.renewal_token, etag=d.etag,
                                   loads=[ShardLoad(replica_id="m-2", rank=0, load=BUSY)]), "", None)
    assert not got.why, got.why
    assert p.activity.engine_loads["m-2"] == BUSY
