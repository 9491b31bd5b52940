"""A failed replica stays on view, holding nothing, for keep_failed: its reason in the node's words is what an
operator reads. A model that keeps failing backs off before each new try; a lost node is replaced at once."""

from __future__ import annotations

from itertools import pairwise

from llmgw.core.reasons import Reason
from llmgw.reconcile.intents import Reap
from llmgw.reconcile.world import Timings
from llmgw.records.state import Phase, replica_phase
from llmgw.wire.messages import ShardState
from tests.clusters import model, node
from tests.reconcile.harness import Sim

TIMINGS = Timings(keep_failed=300.0, retry_base=5.0)


def _fail_on(sim: Sim, node_id: str, reason: str, words: str) -> None:
    """The node reports every shard it was asked to run as failed, with a code and its words."""
    sim.heartbeat(node_id)
    rec = sim.nodes[node_id]
    shards = [ShardState(replica_id=s.replica_id, rank=s.rank, state="failed", reason=reason, message=words)
              for s in rec.report.shards]
    sim.nodes[node_id] = rec.model_copy(update={"report": rec.report.model_copy(update={"shards": shards})})


def test_a_failed_replica_stays_on_view_with_its_reason_and_holds_nothing() -> None:
    sim = Sim([model("m", gpus_per_shard=8)], [node("n1", n_gpus=8)], timings=TIMINGS)
    sim.step()
    (first,) = sim.live("m")
    _fail_on(sim, "n1", "WeightsUnusable", "weights file is empty (an unfinished download?): /models/m")
    sim.step()
    failed = sim.replicas[first.id]
    assert replica_phase(failed) == Phase.Failed and sim.ready_reason(failed) == Reason.WeightsUnusable
    sim.advance(1)
    sim.empty("n1")  # the agent stopped the shard: nothing of it runs
    sim.step()
    kept = sim.replicas[first.id]
    assert kept.released and replica_phase(kept) == Phase.Failed, "gone from view the moment its shard stopped"
    (second,) = sim.live("m")
    assert second.placed and second.assignments[0].node_id == "n1", "the failed one still held the node's GPUs"
    sim.run(310, every=10)
    assert first.id not in sim.replicas, "kept past keep_failed"
    assert any(isinstance(i, Reap) and i.replica_id == first.id for i in sim.intents)


def test_repeated_failures_back_off_and_the_wait_grows() -> None:
    sim = Sim([model("m", gpus_per_shard=8)], [node("n1", n_gpus=8)], timings=TIMINGS)
    sim.step()
    born: dict[str, float] = {}
    for _ in range(60):  # 60 s of a model that fails as soon as it starts
        for r in sim.live("m"):
            born.setdefault(r.id, r.created_at)
        _fail_on(sim, "n1", "ShardFailed", "exited with code 1")
        sim.step()
        sim.advance(1)
        sim.empty("n1")
        sim.step()
    created = sorted(born.values())
    gaps = [b - a for a, b in pairwise(created)]
    assert len(created) >= 3, created
    assert gaps[0] <= 2, "the first failure is replaced at once"
    assert gaps[1] >= 5 and gaps[2] >= 10, f"no back-off between repeated failures: {gaps}"
    assert len(created) <= 6, f"{len(created)} replicas in a minute for a model that cannot start"


def test_a_replica_of_a_lost_node_is_replaced_without_waiting() -> None:
    timings = Timings(keep_failed=300.0, retry_base=5.0, node_lost_after=20.0, loss_grace=0.0)
    sim = Sim([model("m", gpus_per_shard=8)], [node("n1", n_gpus=8), node("n2", n_gpus=8), node("n3", n_gpus=8),
                                               node("n4", n_gpus=8)], timings=timings)
    sim.run(10)
    for _ in range(2):  # two losses in a row: neither is the replica's own fault
        (r,) = sim.live("m")
        where = r.assignments[0].node_id
        sim.run(25, silent={where})
        assert sim.replicas[r.id].failed and sim.ready_reason(sim.replicas[r.id]) == Reason.NodeLost
        (again,) = sim.live("m")
        assert again.placed, "waited after a node loss"
        sim.heartbeat()
        sim.run(5)


def test_a_node_cannot_choose_the_control_planes_reasons_for_its_shard() -> None:
    """A failed shard said to be NodeLost (not the replica's fault: no back-off) is counted as ShardFailed."""
    sim = Sim([model("m", gpus_per_shard=8)], [node("n1", n_gpus=8)], timings=TIMINGS)
    sim.step()
    (first,) = sim.live("m")
    _fail_on(sim, "n1", "NodeLost", "exited with code 1")
    sim.step()
    assert sim.ready_reason(sim.replicas[first.id]) == Reason.ShardFailed


def test_the_summary_counts_no_card_of_a_released_replica() -> None:
    from llmgw.control.views.summary import summarize

    sim = Sim([model("m", gpus_per_shard=8, min_=1, max_=1)], [node("n1", n_gpus=8)], timings=TIMINGS)
    sim.step()
    _fail_on(sim, "n1", "ShardFailed", "exited with code 1")
    sim.step()
    sim.advance(1)
    sim.empty("n1")
    sim.step()
    released = [r for r in sim.replicas.values() if r.released]
    assert released
    (cap,) = summarize(list(sim.nodes.values()), released, [], {}, sim.now).capacity
    assert (cap.used, cap.free) == (0, 8)


def test_a_crash_looping_replica_is_placed_again_elsewhere() -> None:
    """The engine on n1 exits until the supervisor gives up: the replacement goes to n2, not back to n1, though
    n1 is first by name, has the weights and still has eight free cards (a part-used node is preferred). With
    nowhere else to go it goes back to n1: a preference, never a filter."""
    sim = Sim([model("m", gpus_per_shard=8)], [node("n1", n_gpus=16, weights=("/models/m",)), node("n2", n_gpus=8)],
              timings=TIMINGS)
    sim.step()
    (first,) = sim.live("m")
    assert first.assignments[0].node_id == "n1"
    _fail_on(sim, "n1", "EngineExited", "gave up after 5 restarts; exited with code 127: libgomp.so.1: cannot open")
    sim.step()
    assert sim.replicas[first.id].failed
    (second,) = sim.live("m")
    assert second.placed and second.assignments[0].node_id == "n2"
    alone = Sim([model("m", gpus_per_shard=8)], [node("n1", n_gpus=8)], timings=TIMINGS)
    alone.step()
    _fail_on(alone, "n1", "EngineExited", "exited with code 1")
    alone.step()
    alone.advance(1)
    alone.empty("n1")
    alone.run(10)
    (again,) = alone.live("m")
    assert again.placed and again.assignments[0].node_id == "n1"
