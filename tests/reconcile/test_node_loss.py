"""A silent node is lost; its replicas fail, are reaped, and are replaced on a fabric that can hold all of them."""

from __future__ import annotations

from llmgw.core.explanation import Shortfall
from llmgw.core.reasons import Reason
from llmgw.reconcile.intents import Fail, MarkLost, Place, Reap
from llmgw.reconcile.world import Timings
from tests.clusters import model, node
from tests.reconcile.harness import Sim

FABRIC = {"node01": "ib-a", "node02": "ib-a", "node03": "ib-b", "node04": "ib-b", "node05": "ib-b", "node06": "ib-b"}


def _cluster(n: int = 4) -> Sim:
    big = model("big", nodes=2, gpus_per_shard=4, min_=2, max_=2)
    nodes = [node(nid, fabric=FABRIC[nid]) for nid in sorted(FABRIC)[:n]]
    sim = Sim([big], nodes)
    sim.step()
    sim.heartbeat()
    sim.step()
    return sim


def _never_across_fabrics(sim: Sim) -> None:
    for i in sim.intents:
        if isinstance(i, Place):
            fabrics = {FABRIC[a.node_id] for a in i.assignments}
            assert len(fabrics) == 1, f"{i.replica_id} spans {fabrics}: {[a.node_id for a in i.assignments]}"
            assert {a.fabric for a in i.assignments} == fabrics


def test_a_node_is_lost_only_after_node_lost_after_of_silence() -> None:
    sim = Sim([], [node("node01"), node("node02")], timings=Timings(node_lost_after=60.0))
    sim.run(60, silent={"node02"})  # exactly the limit: not yet
    assert not [i for i in sim.intents if isinstance(i, MarkLost)]
    assert not sim.nodes["node02"].lost
    sim.advance(1)
    sim.heartbeat("node01")
    out = sim.step()
    lost = [i for i in out if isinstance(i, MarkLost)]
    assert [i.node_id for i in lost] == ["node02"]
    assert "node node02 lost: silent for 61s (limit 60s)" in sim.events
    sim.advance(5)
    assert not [i for i in sim.step() if isinstance(i, MarkLost)], "a lost node is marked lost once"


def test_two_replicas_of_a_two_node_model_take_one_fabric_each() -> None:
    sim = _cluster()
    reps = sim.of("big")
    assert len(reps) == 2 and all(r.ready for r in reps)
    assert sorted(tuple(r.node_ids()) for r in reps) == [("node01", "node02"), ("node03", "node04")]
    assert all(r.endpoint.endswith(f":{r.assignments[0].serve_port}") for r in reps)
    _never_across_fabrics(sim)


def test_losing_node02_fails_and_reaps_its_replica_and_the_replacement_waits_rather_than_span_fabrics() -> None:
    sim = _cluster()
    a, b = sim.of("big")
    assert a.node_ids() == ["node01", "node02"]

    sim.run(60, silent={"node02"})
    assert sim.replicas[a.id].ready, "60s of silence is not yet lost"

    # t+61: node02 is lost, the ib-a replica fails in the same pass, a replacement is wanted
    sim.advance(1)
    sim.heartbeat("node01", "node03", "node04", keep=[(a.id, 0)])  # node01 has not stopped rank 0 yet
    out = sim.step()
    assert [i.node_id for i in out if isinstance(i, MarkLost)] == ["node02"]
    failed = sim.replicas[a.id]
    assert failed.failed and not failed.ready and failed.endpoint == ""
    assert sim.ready_reason(failed) == Reason.NodeLost
    assert "node02" in failed.conditions[-1].message
    assert sim.replicas[b.id].ready
    (c,) = [r for r in sim.live("big") if r.id != b.id]
    assert not c.placed

    # still reported by a live node: kept, and its cards stay taken
    sim.advance(3)
    sim.heartbeat("node01", "node03", "node04", keep=[(a.id, 0)])
    assert not [i for i in sim.step() if isinstance(i, Reap)]
    assert a.id in sim.replicas

    # node01 stops it; node02's stale report still lists rank 1, but a lost node's word does not count
    assert any(s.replica_id == a.id for s in sim.nodes["node02"].report.shards)
    sim.advance(3)
    sim.heartbeat("node01", "node03", "node04")
    assert [i.replica_id for i in sim.step() if isinstance(i, Reap)] == [a.id]

    # the replacement waits, and says why: ib-a has one whole node, ib-b is full
    sim.run(300, silent={"node02"})
    c = sim.replicas[c.id]
    assert not c.placed
    assert sim.scheduled(c) == ("False", Reason.Unschedulable)
    e = c.explanation
    assert e is not None and not e.placed and e.nodes_evaluated == 4
    assert Shortfall(fabric="ib-a", fit=1, need=2) in e.shortfalls
    assert e.filtered == {Reason.NodeNotReady: 1, Reason.NodeNotWhole: 2, Reason.FabricTooSmall: 1}
    assert any(f"replica {c.id} of big cannot be placed" in ev for ev in sim.events)
    assert len(sim.of("big")) == 2, "one replacement, not one per pass"
    _never_across_fabrics(sim)

    # node02 returns: the replacement lands on ib-a, whole
    sim.run(5)
    c = sim.replicas[c.id]
    assert c.node_ids() == ["node01", "node02"] and {a.fabric for a in c.assignments} == {"ib-a"}
    _never_across_fabrics(sim)


def test_the_replacement_moves_to_the_fabric_that_can_hold_all_of_it() -> None:
    sim = _cluster(6)  # ib-b has two free nodes besides the replica on node03+node04
    a, b = sim.of("big")
    sim.run(61, silent={"node02"})
    assert sim.replicas[a.id].failed or a.id not in sim.replicas
    (c,) = [r for r in sim.live("big") if r.id != b.id]
    assert c.node_ids() == ["node05", "node06"]
    assert {x.fabric for x in c.assignments} == {"ib-b"}
    assert "node01" not in c.node_ids()
    sim.run(5, silent={"node02"})
    assert sim.replicas[c.id].ready
    _never_across_fabrics(sim)


def test_a_single_node_replica_on_a_lost_node_fails_with_node_lost() -> None:
    small = model("small", gpus_per_shard=8, min_=1, max_=1)
    sim = Sim([small], [node("node01"), node("node02")])
    sim.step()
    sim.heartbeat()
    sim.step()
    (r,) = sim.of("small")
    assert r.ready and r.node_ids() == ["node01"]
    sim.run(65, silent={"node01"})
    assert r.id not in sim.replicas or sim.replicas[r.id].failed
    assert any(isinstance(i, Fail) and i.replica_id == r.id and i.reason == Reason.NodeLost for i in sim.intents)
    (new,) = sim.live("small")
    assert new.node_ids() == ["node02"]


def test_more_than_half_the_nodes_silent_at_once_is_the_control_planes_fault_not_theirs() -> None:
    from llmgw.reconcile.intents import HoldLosses

    sim = Sim([], [node(f"n{i}") for i in range(4)], timings=Timings(node_lost_after=10.0))
    sim.run(30, silent={"n1", "n2", "n3"})  # only n0 is heard: 3 of 4 silent
    assert not [i for i in sim.intents if isinstance(i, MarkLost)]
    holds = [i for i in sim.intents if isinstance(i, HoldLosses)]
    assert holds and (holds[-1].silent, holds[-1].live) == (3, 4)
    assert "3 of 4 live nodes are silent at once" in sim.holding
    sim.run(5)  # contact returns: nobody was lost, nothing is rebuilt
    assert not any(n.lost for n in sim.nodes.values())


def test_losses_are_declared_at_a_bounded_rate_longest_silent_first() -> None:
    sim = Sim([], [node(f"n{i:02d}") for i in range(20)], timings=Timings(node_lost_after=10.0))
    sim.run(5)
    sim.run(3, every=3, silent={"n00"})
    sim.run(20, every=20, silent={"n00", "n01", "n02", "n03", "n04"})  # 5 of 20 silent: a quarter
    first = [i.node_id for i in sim.intents if isinstance(i, MarkLost)]
    assert first == ["n00", "n01"], "two (a tenth of 20) per pass, the longest silent first"
    sim.run(2, every=1, silent={"n00", "n01", "n02", "n03", "n04"})
    assert sorted(i.node_id for i in sim.intents if isinstance(i, MarkLost)) == [f"n0{i}" for i in range(5)]


def test_silence_is_counted_from_the_control_planes_return_after_a_stall() -> None:
    from llmgw.reconcile.reconcile import reconcile

    sim = Sim([], [node("n0"), node("n1"), node("n2")], timings=Timings(node_lost_after=10.0, loss_grace=3.0))
    sim.run(5)
    sim.advance(30)  # the control plane was stopped; on resuming it has read n1's and n2's heartbeats, not n0's
    sim.heartbeat("n1", "n2")
    w = sim.world()
    assert [i.node_id for i in reconcile(w) if isinstance(i, MarkLost)] == ["n0"]  # from its last heartbeat read
    resumed = type(w)(**{**w.__dict__, "resumed_at": sim.now - 1})
    assert not [i for i in reconcile(resumed) if isinstance(i, MarkLost)]


def test_a_partition_crossing_the_limit_one_heartbeat_phase_apart_loses_nobody() -> None:
    """Found by review: cut off together, nodes cross the limit in heartbeat-phase order, and the first ones were
    declared lost before the majority rule saw the rest."""
    sim = Sim([], [node(f"n{i}") for i in range(10)], timings=Timings(node_lost_after=10.0, loss_grace=3.0))
    sim.run(5, every=1)
    for i in range(6):  # n0..n5 last heard 0.4 s apart, then nothing
        sim.advance(0.4)
        sim.heartbeat(*[f"n{j}" for j in range(i, 10)])
        sim.step()
    sim.run(30, every=0.5, silent={f"n{i}" for i in range(6)})
    assert not [i for i in sim.intents if isinstance(i, MarkLost)]


def test_a_node_lost_earlier_does_not_make_the_next_loss_look_like_a_partition() -> None:
    """Found by review: with three nodes and one long lost, the death of a second was held for ever."""
    sim = Sim([], [node("n0"), node("n1"), node("n2")], timings=Timings(node_lost_after=10.0, loss_grace=3.0))
    sim.run(30, silent={"n2"})
    assert sim.nodes["n2"].lost
    sim.run(30, silent={"n1", "n2"})
    assert sim.nodes["n1"].lost


def test_every_node_silent_is_held_however_few() -> None:
    sim = Sim([], [node("n0"), node("n1")], timings=Timings(node_lost_after=10.0, loss_grace=3.0))
    sim.run(5)
    sim.run(30, silent={"n0", "n1"})
    assert not any(n.lost for n in sim.nodes.values())
