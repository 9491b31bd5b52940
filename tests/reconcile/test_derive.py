"""derive() and its neighbours on their own: a replica's failure, readiness and endpoint from the nodes' reports,
and a stop request. Pure functions, so each rule is held with the smallest input that shows it (the rules a
mutation-testing run found unguarded by test_readiness's whole-cluster walk)."""

from __future__ import annotations

from llmgw.core.conditions import ConditionType, Status
from llmgw.core.reasons import Reason
from llmgw.reconcile import transitions
from llmgw.reconcile.status import assigned_endpoint, derive, shard_reason, stopped
from llmgw.records.state import NodeRecord, ReplicaRecord, ShardAssignment, StopRequest
from llmgw.wire.messages import ShardState
from tests.clusters import node

NOW = 1000.0


def replica(*ranks: tuple[str, str, int | None], rid: str = "r1") -> ReplicaRecord:
    """A replica whose rank i runs on (node, address, serve port)."""
    return ReplicaRecord(id=rid, model="m", created_at=0.0, shards_expected=len(ranks), assignments=[
        ShardAssignment(rank=i, node_id=n, address=a, serve_port=port) for i, (n, a, port) in enumerate(ranks)])


def reporting(node_id: str, *shards: ShardState, lost: bool = False) -> NodeRecord:
    return node(node_id, shards=list(shards), lost=lost)


def shard(rank: int, state: str, rid: str = "r1", **kw: str) -> ShardState:
    return ShardState(replica_id=rid, rank=rank, state=state, **kw)  # type: ignore[arg-type]


def ready_condition(r: ReplicaRecord) -> tuple[Status, Reason, str, float]:
    c = r.condition(ConditionType.Ready)
    assert c is not None
    return c.status, c.reason, c.message, c.last_transition


def test_a_node_may_name_only_its_own_reasons_for_a_shard() -> None:
    assert shard_reason("ModelNotLoaded", Reason.ShardsStarting) == Reason.ModelNotLoaded
    assert shard_reason("AllShardsReady", Reason.ShardsStarting) == Reason.ShardsStarting  # the control plane's
    assert shard_reason("NoSuchCode", Reason.ShardFailed) == Reason.ShardFailed


def test_a_failed_stopped_or_unplaced_replica_is_left_as_it_is() -> None:
    nodes = {"n1": reporting("n1", shard(0, "ready"))}
    failed = transitions.failed(replica(("n1", "10.0.0.1", 20000)), Reason.NodeLost, "gone", 1.0)
    assert failed.failed
    assert derive(failed, nodes, NOW) is failed
    stop = StopRequest(reason=Reason.Idle, message="idle", at=1.0)
    halted = replica(("n1", "10.0.0.1", 20000)).model_copy(update={"stop": stop})
    assert derive(halted, nodes, NOW) is halted
    unplaced = ReplicaRecord(id="r1", model="m", created_at=0.0, shards_expected=1)
    assert derive(unplaced, nodes, NOW) is unplaced


def test_a_lost_node_fails_the_replica_naming_it_and_the_rank() -> None:
    r = replica(("n1", "10.0.0.1", 20000), ("n2", "10.0.0.2", None))
    for nodes in ({"n1": reporting("n1", shard(0, "ready")), "n2": reporting("n2", shard(1, "running"), lost=True)},
                  {"n1": reporting("n1", shard(0, "ready"))}):
        out = derive(r.model_copy(update={"endpoint": "http://10.0.0.1:20000"}), nodes, NOW)
        assert (out.failed, out.failed_at, out.endpoint) == (True, NOW, "")
        assert ready_condition(out) == (Status.FALSE, Reason.NodeLost, "node n2 lost (rank 1)", NOW)


def test_a_failed_shard_fails_the_replica_with_the_nodes_code_and_words() -> None:
    r = replica(("n1", "10.0.0.1", 20000))
    nodes = {"n1": reporting("n1", shard(0, "failed", message="no such file", reason="WeightsUnusable"))}
    out = derive(r, nodes, NOW)
    assert (out.failed, out.failed_at) == (True, NOW)
    assert ready_condition(out) == (Status.FALSE, Reason.WeightsUnusable, "rank 0 on n1 failed: no such file", NOW)


def test_a_rank_of_a_multi_node_group_exiting_breaks_the_group_even_without_words() -> None:
    r = replica(("n1", "10.0.0.1", 20000), ("n2", "10.0.0.2", None))
    nodes = {"n1": reporting("n1", shard(0, "ready")), "n2": reporting("n2", shard(1, "exited"))}
    out = derive(r, nodes, NOW)
    assert out.failed and out.failed_at == NOW
    assert ready_condition(out)[1:3] == (Reason.ShardFailed,
                                         "rank 1 on n2 exited (no reason given): the group is broken")


def test_only_this_replicas_shard_of_that_rank_counts() -> None:
    """Another replica's rank 0 on the same node, failed, says nothing about this one."""
    r = replica(("n1", "10.0.0.1", 20000), ("n2", "10.0.0.2", None))
    nodes = {"n1": reporting("n1", shard(0, "ready"), shard(0, "failed", rid="other", message="x"),
                             shard(1, "failed", message="not n1's rank")),
             "n2": reporting("n2", shard(1, "running"), shard(1, "failed", rid="other", message="y"))}
    out = derive(r, nodes, NOW)
    assert not out.failed and out.endpoint == "http://10.0.0.1:20000"


def test_a_replica_short_of_an_assignment_fails_as_missing() -> None:
    r = replica(("n1", "10.0.0.1", 20000)).model_copy(update={"shards_expected": 2})
    out = derive(r, {"n1": reporting("n1", shard(0, "ready"))}, NOW)
    assert (out.failed, out.failed_at) == (True, NOW)
    assert ready_condition(out) == (Status.FALSE, Reason.ShardMissing, "1 of 2 shards assigned", NOW)


def test_not_ready_says_each_ranks_state_and_the_first_reason_a_shard_gave() -> None:
    r = replica(("n1", "10.0.0.1", 20000), ("n2", "10.0.0.2", None), ("n3", "10.0.0.3", None))
    nodes = {"n1": reporting("n1", shard(0, "starting", message="loading", reason="ModelNotLoaded")),
             "n2": reporting("n2", shard(1, "running")),
             "n3": reporting("n3", shard(2, "starting", reason="EngineExited"))}
    out = derive(r.model_copy(update={"endpoint": "http://stale"}), nodes, NOW)
    assert not out.failed and out.endpoint == ""
    assert ready_condition(out) == (Status.FALSE, Reason.ModelNotLoaded,
                                    "rank 0: starting (loading), rank 1: running, rank 2: starting", NOW)


def test_a_reason_no_shard_may_give_reads_as_starting() -> None:
    r = replica(("n1", "10.0.0.1", 20000))
    nodes = {"n1": reporting("n1", shard(0, "starting", reason="NoSuchCode"))}
    assert ready_condition(derive(r, nodes, NOW))[1] == Reason.ShardsStarting


def test_a_ready_shard_reporting_a_reason_does_not_make_the_replica_not_ready() -> None:
    r = replica(("n1", "10.0.0.1", 20000), ("n2", "10.0.0.2", None))
    nodes = {"n1": reporting("n1", shard(0, "ready", reason="EngineExited")),
             "n2": reporting("n2", shard(1, "starting"))}
    assert ready_condition(derive(r, nodes, NOW))[1] == Reason.ShardsStarting


def test_ready_sets_an_empty_message_and_the_assigned_endpoint() -> None:
    out = derive(replica(("n1", "10.0.0.1", 20000)), {"n1": reporting("n1", shard(0, "ready"))}, NOW)
    assert ready_condition(out) == (Status.TRUE, Reason.AllShardsReady, "", NOW)
    assert out.endpoint == "http://10.0.0.1:20000" and out.ready_at == NOW


def test_the_assigned_endpoint_is_built_only_from_a_sound_address_and_port() -> None:
    assert assigned_endpoint(replica(("n1", "fd00::1", 20000))) == "http://[fd00::1]:20000"
    assert assigned_endpoint(replica(("n1", "10.0.0.1", 1))) == "http://10.0.0.1:1"
    assert assigned_endpoint(replica(("n1", "10.0.0.1", 65535))) == "http://10.0.0.1:65535"
    for bad in (replica(("n1", "10.0.0.1", None)), replica(("n1", "10.0.0.1", 0)), replica(("n1", "10.0.0.1", 65536)),
                replica(("n1", "fe80::1%eth0", 20000)), replica(("n1", "evil.example", 20000))):
        assert assigned_endpoint(bad) == "", bad.assignments
    no_leader = replica(("n1", "10.0.0.1", 20000)).model_copy(update={"assignments": [
        ShardAssignment(rank=1, node_id="n1", address="10.0.0.1", serve_port=20000)]})
    assert assigned_endpoint(no_leader) == ""


def test_a_stop_request_records_why_and_for_whom_and_takes_the_replica_out_of_routing() -> None:
    r = replica(("n1", "10.0.0.1", 20000)).model_copy(update={"endpoint": "http://10.0.0.1:20000"})
    out = stopped(r, Reason.Evicted, "room for big", NOW, for_model="big")
    assert out.stop == StopRequest(reason=Reason.Evicted, message="room for big", for_model="big", at=NOW)
    assert out.endpoint == "" and not out.failed
    assert ready_condition(out) == (Status.FALSE, Reason.Evicted, "room for big", NOW)
    assert stopped(r, Reason.Idle, "unused", NOW).stop == StopRequest(reason=Reason.Idle, message="unused", at=NOW)
