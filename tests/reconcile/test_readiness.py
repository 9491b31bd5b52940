"""A replica is Ready only with every shard ready; a replica short of a shard fails; a restart adopts, not restarts."""

from __future__ import annotations

from llmgw.config.server import ModelSpec, ServerConfig, TLSFiles
from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.core.reasons import Reason
from llmgw.reconcile.intents import MarkLost
from llmgw.reconcile.reconcile import reconcile
from llmgw.reconcile.status import derive
from llmgw.records.state import ReplicaRecord
from llmgw.store.sqlite import SqliteStore
from tests.clusters import model, node
from tests.reconcile.harness import T0, Sim


def _two_node() -> tuple[Sim, ReplicaRecord]:
    big = model("big", nodes=2, gpus_per_shard=4, min_=1, max_=1)
    sim = Sim([big], [node("node01", fabric="ib-a"), node("node02", fabric="ib-a")])
    sim.step()
    (r,) = sim.of("big")
    assert r.placed and r.shards_expected == 2
    return sim, r


def test_ready_needs_every_shard_ready() -> None:
    sim, r = _two_node()
    sim.heartbeat(overrides={(r.id, 1): "starting"})
    sim.step()
    r = sim.replicas[r.id]
    assert not r.ready and r.endpoint == ""
    assert sim.ready_reason(r) == Reason.ShardsStarting
    assert "rank 1: starting" in r.conditions[-1].message

    sim.advance(5)
    sim.heartbeat(overrides={(r.id, 0): "running"})  # rank 0 serves HTTP: running is not yet healthy
    sim.step()
    assert not sim.replicas[r.id].ready

    sim.advance(5)
    sim.heartbeat()  # rank 0 ready, rank 1 running without a port: a worker has nothing to probe
    sim.step()
    r = sim.replicas[r.id]
    assert r.ready and r.ready_at == sim.now
    assert r.endpoint == f"http://{sim.nodes['node01'].report.address}:{r.assignments[0].serve_port}"


def test_only_rank_zero_reported_is_not_ready() -> None:
    sim, r = _two_node()
    sim.heartbeat("node01")  # node02 says nothing of rank 1 yet
    sim.step()
    r = sim.replicas[r.id]
    assert not r.ready and not r.failed
    assert "rank 1: not yet started on node02" in r.conditions[-1].message


def test_a_rank_that_disappears_after_being_seen_fails_the_replica() -> None:
    sim, r = _two_node()
    sim.heartbeat()
    sim.step()
    assert sim.replicas[r.id].ready and sim.replicas[r.id].seen_ranks == [0, 1]
    sim.advance(5)
    sim.heartbeat("node01")
    sim.empty("node02")  # alive, and no longer running rank 1
    sim.step()
    r = sim.replicas[r.id]
    assert r.failed and sim.ready_reason(r) == Reason.ShardMissing
    assert "rank(s) [1]" in r.conditions[-1].message


def test_a_failed_shard_fails_the_replica() -> None:
    sim, r = _two_node()
    sim.heartbeat(overrides={(r.id, 1): "failed"})
    sim.step()
    r = sim.replicas[r.id]
    assert r.failed and sim.ready_reason(r) == Reason.ShardFailed and "rank 1 on node02" in r.conditions[-1].message


def test_a_replica_short_of_a_shard_fails_even_when_every_shard_it_has_is_ready() -> None:
    sim, r = _two_node()
    half = r.model_copy(update={"assignments": r.assignments[:1]})  # a record that lost rank 1
    sim.replicas[r.id] = half
    sim.heartbeat("node01")
    out = derive(half, sim.nodes, sim.now)
    assert out.failed and not out.ready
    assert sim.ready_reason(out) == Reason.ShardMissing and "1 of 2 shards assigned" in out.conditions[-1].message
    sim.step()
    assert sim.replicas[r.id].failed


def _plane(clock: FakeClock, store: SqliteStore, *models: ModelSpec) -> ControlPlane:
    cfg = ServerConfig(tls=TLSFiles(ca="ca.pem", cert="c.pem", key="k.pem"), models=list(models))
    plane = ControlPlane(cfg, store, clock)
    plane.load()
    return plane


def test_a_restart_adopts_running_replicas_where_they_are() -> None:
    clock = FakeClock(T0)
    store = SqliteStore(":memory:").open()
    big = model("big", nodes=2, gpus_per_shard=4, min_=1, max_=1)
    small = model("small", gpus_per_shard=2, min_=0, max_=1, idle=600)
    sim = Sim([big, small], [node("node01", fabric="ib-a"), node("node02", fabric="ib-a"), node("node03")],
              clock=clock)
    sim.demand["small"] = sim.now
    sim.step()
    sim.heartbeat()
    sim.step()
    before = {r.id: r for r in sim.replicas.values()}
    assert len(before) == 2 and all(r.ready for r in before.values())
    for n in sim.nodes.values():
        store.put_node(n)
    for r in before.values():
        # written by an older release that did not record the shard count
        store.put_replica(r.model_copy(update={"shards_expected": 1}))

    clock.advance(900)  # the control plane was down for 15 minutes; every node's last_seen is stale
    plane = _plane(clock, store, big, small)
    assert {r.id: r.shards_expected for r in plane.registry.replicas.values()} == {
        r.id: r.shards_expected for r in before.values()}
    intents = plane.passes.reconcile_once()
    assert not [i for i in intents if isinstance(i, MarkLost)], "timers restart from the restart"
    after = plane.registry.replicas
    assert set(after) == set(before), "adopted, not replaced"
    for rid, r in after.items():
        assert r.assignments == before[rid].assignments
        assert r.ready and r.stop is None and not r.failed
    # unknown use counts from the restart, not from a ready_at 15 minutes old: still running after 599s more
    clock.advance(599)
    for n in list(plane.registry.nodes.values()):
        plane.heartbeats.heartbeat(n.report)
    plane.passes.reconcile_once()
    assert plane.registry.replicas[next(r.id for r in before.values() if r.model == "small")].stop is None


def test_a_restart_over_half_a_replica_does_not_call_it_ready() -> None:
    clock = FakeClock(T0)
    store = SqliteStore(":memory:").open()
    big = model("big", nodes=2, gpus_per_shard=4, min_=1, max_=1)
    sim = Sim([big], [node("node01", fabric="ib-a"), node("node02", fabric="ib-a")], clock=clock)
    sim.step()
    (r,) = sim.of("big")
    # as an older release stored it: no shard count, no ranks seen
    store.put_replica(r.model_copy(update={"shards_expected": 1, "seen_ranks": []}))
    sim.heartbeat("node01")  # only rank 0 runs; node02 has nothing
    sim.empty("node02")
    for n in sim.nodes.values():
        store.put_node(n)
    clock.advance(30)
    plane = _plane(clock, store, big)
    assert plane.registry.replicas[r.id].shards_expected == 2
    plane.passes.reconcile_once()
    got = plane.registry.replicas[r.id]
    assert not got.ready and got.endpoint == ""
    assert "rank 1: not yet started on node02" in got.conditions[-1].message


def test_reconcile_is_level_triggered_a_settled_world_produces_nothing() -> None:
    sim, _ = _two_node()
    sim.heartbeat()
    sim.step()
    sim.advance(1)
    out = reconcile(sim.world())
    assert out == []


def test_a_rank_of_a_multi_node_replica_that_exits_fails_it_at_once() -> None:
    """The defect: the worker's node died, the leader's engine exited at once, and the replica stayed
    ShardsStarting (503 for every request) until the worker's node was declared lost a minute later."""
    sim, r = _two_node()
    sim.heartbeat()
    sim.step()
    assert sim.replicas[r.id].ready
    sim.advance(2)  # node02 goes silent, well inside node_lost_after; its last report still shows rank 1
    sim.heartbeat("node01", overrides={(r.id, 0): "exited"})
    sim.step()
    failed = sim.replicas[r.id]
    assert failed.failed and sim.ready_reason(failed) == Reason.ShardFailed
    assert "rank 0 on node01 exited" in failed.conditions[-1].message
    assert not any(n.lost for n in sim.nodes.values())
    # its replacement does not land on the silent node: node02's cards stay held by what it last reported
    (new,) = sim.live("big")
    assert not new.placed


def _running_two_node() -> tuple[Sim, ReplicaRecord]:
    """A two-node replica both nodes reported on, a moment later: ready for one to report its rank exited."""
    sim, r = _two_node()
    sim.heartbeat()
    sim.step()
    sim.advance(2)
    return sim, r


def _exited(sim: Sim, node_id: str, r: ReplicaRecord, rank: int, message: str, lost_peer: int | None) -> None:
    """The node reports its rank of r exited, in the engine's words, naming the peer that went when it did."""
    sim.heartbeat(node_id, overrides={(r.id, rank): "exited"})
    rec = sim.nodes[node_id]
    shards = [s.model_copy(update={"message": message, "lost_peer": lost_peer}) if s.rank == rank else s
              for s in rec.report.shards]
    sim.nodes[node_id] = rec.model_copy(update={"report": rec.report.model_copy(update={"shards": shards})})


def test_a_broken_group_names_the_node_of_the_rank_that_went() -> None:
    """The leader's node reports; the worker's node died silent: the failure says which node went, at once."""
    sim, r = _running_two_node()
    _exited(sim, "node01", r, 0, "exited with code 1: collective broken: worker rank 1 disconnected", 1)
    sim.step()
    msg = sim.replicas[r.id].conditions[-1].message
    assert msg.startswith("worker rank 1 on node02 disconnected: rank 0 on node01 exited ("), msg


def test_a_worker_that_lost_its_leader_names_the_leaders_node() -> None:
    sim, r = _running_two_node()
    _exited(sim, "node02", r, 1, "exited with code 1: lost the leader", 0)
    sim.step()
    msg = sim.replicas[r.id].conditions[-1].message
    assert msg.startswith("leader rank 0 on node01 disconnected: rank 1 on node02 exited ("), msg


def test_the_rank_that_exited_of_itself_is_named_before_the_one_its_going_ended() -> None:
    sim, r = _running_two_node()
    _exited(sim, "node01", r, 0, "worker rank 1 disconnected", 1)
    _exited(sim, "node02", r, 1, "exited with code 139: segfault", None)
    sim.step()
    msg = sim.replicas[r.id].conditions[-1].message
    assert msg.startswith("rank 1 on node02 exited (exited with code 139: segfault)"), msg


def test_a_single_node_shard_that_exits_is_restarted_not_failed() -> None:
    sim = Sim([model("small", gpus_per_shard=1)], [node("node01")])
    sim.step()
    (r,) = sim.of("small")
    sim.heartbeat()
    sim.step()
    sim.heartbeat(overrides={(r.id, 0): "exited"})
    sim.step()
    assert not sim.replicas[r.id].failed


def test_a_replica_whose_engine_stopped_answering_is_unresponsive_not_starting() -> None:
    """Its shard served and now misses its health probes: the replica's phase says so (ctl status, the dashboard),
    and a model with no other replica is one a router refuses at once; one still loading is not."""
    from llmgw.records.state import Phase, not_answering, replica_phase

    sim, r = _two_node()
    sim.heartbeat()
    sim.step()
    assert replica_phase(sim.replicas[r.id]) == Phase.Ready
    words = "not answering since 2027-01-15 08:00:00 UTC: 3 health probes missed in a row"
    sim.heartbeat(overrides={(r.id, 0): "unresponsive"})
    rec = sim.nodes["node01"]
    shards = [s.model_copy(update={"reason": "EngineUnresponsive", "message": words}) for s in rec.report.shards]
    sim.nodes["node01"] = rec.model_copy(update={"report": rec.report.model_copy(update={"shards": shards})})
    sim.step()
    hung = sim.replicas[r.id]
    assert not hung.failed and sim.ready_reason(hung) == Reason.EngineUnresponsive
    assert replica_phase(hung) == Phase.Unresponsive
    assert words in hung.conditions[-1].message
    assert not_answering(sim.replicas.values()) == {"big": f"replica {r.id}: {hung.conditions[-1].message}"}
    loading = ReplicaRecord(id="big-new", model="big", created_at=sim.now, shards_expected=2)  # on its way
    assert not_answering([hung, loading]) == {}


def test_an_engine_never_ready_is_starting() -> None:
    from llmgw.records.state import Phase, not_answering, replica_phase

    sim, r = _two_node()
    sim.heartbeat(overrides={(r.id, 0): "starting"})
    sim.step()
    assert replica_phase(sim.replicas[r.id]) == Phase.Starting
    assert not_answering(sim.replicas.values()) == {}


def test_a_peer_rank_outside_the_group_is_named_as_unknown_not_trusted() -> None:
    """A node's report is a claim: a lost peer rank the replica has no shard for names no node (and breaks nothing)."""
    sim, r = _running_two_node()
    _exited(sim, "node01", r, 0, "worker rank 7 disconnected", 7)
    sim.step()
    msg = sim.replicas[r.id].conditions[-1].message
    assert msg.startswith("worker rank 7 on ? disconnected: rank 0 on node01 exited ("), msg
