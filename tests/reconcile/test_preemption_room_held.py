"""The room preemption makes is held for the model it was made for while the rest of its victims drain: a lower
priority replica asking meanwhile is not placed into the part already freed."""

from __future__ import annotations

from llmgw.reconcile.intents import Evict
from tests.clusters import node
from tests.reconcile.harness import Sim
from tests.reconcile.test_preemption import TIMINGS, _gone, _preempted, _scheduled, _start, _want, on_demand, promised


def test_room_freed_by_one_victim_is_held_while_another_drains() -> None:
    sim = Sim([on_demand("a", gpus=4), on_demand("b", gpus=4)], [node("n1")], timings=TIMINGS)
    ids = _start(sim, "a", "b")
    rid = _want(sim, promised("big", gpus=8))
    assert sorted(_preempted(sim)) == sorted([ids["a"], ids["b"]])
    sim.outstanding[ids["b"]] = 1  # b was routed a request before the table dropped it: it drains
    sim.advance(2)
    sim.heartbeat(keep=[(ids["b"], 0)])  # a is gone, b still runs
    sim.step()
    assert ids["a"] not in sim.replicas and ids["b"] in sim.replicas
    sim.models["c"] = on_demand("c", gpus=4)  # asked for while b drains: a's 4 cards are free
    sim.demand["c"] = sim.now
    sim.run(6, every=3, keep=[(ids["b"], 0)])
    (late,) = (r.id for r in sim.live("c"))
    assert not sim.replicas[late].placed, "c took the room made for big"
    sim.outstanding[ids["b"]] = 0
    sim.run(10, every=5)
    assert sim.replicas[rid].node_ids() == ["n1"]
    assert sorted(_preempted(sim)) == sorted([ids["a"], ids["b"]]), "nobody else preempted"


def test_room_made_for_a_priority_is_not_taken_by_a_replica_beyond_min() -> None:
    """A promised model's replica added for load beyond min is a convenience (it preempts nothing): the room a model
    of priority 50 had made for itself is not given to it first."""
    sim = Sim([on_demand("od")], [node("n1"), node("n2")], timings=TIMINGS)
    ids = _start(sim, "od")
    scaling = on_demand("x").scaling.model_copy(update={"min": 1, "max": 2, "target_in_flight": 1.0,
                                                        "scale_up_after": 5.0})
    sim.models["busy"] = promised("busy", scaling=scaling)
    sim.run(10)
    (first,) = sim.live("busy")
    sim.outstanding[first.id] = 4
    sim.run(10)
    extra = [r for r in sim.live("busy") if r.id != first.id]
    assert len(extra) == 1 and not extra[0].placed and _preempted(sim) == [], "beyond min: od is not taken for it"
    rid = _want(sim, on_demand("urgent", priority=50))
    assert _preempted(sim) == [ids["od"]]
    sim.run(15, every=5)
    assert sim.replicas[rid].placed, "the room made for urgent went to busy's extra replica"
    assert not sim.replicas[extra[0].id].placed


def test_each_missing_replica_of_a_model_makes_its_own_room_and_waits_for_its_own_victims() -> None:
    """Two replicas missing, two victims needed: both go in the first round, not the second only after the first
    has drained; and each replica's wait names the victim whose room it will take."""
    sim = Sim([on_demand("a"), on_demand("b")], [node("n1"), node("n2")], timings=TIMINGS)
    ids = _start(sim, "a", "b")
    scaling = on_demand("x").scaling.model_copy(update={"min": 2, "max": 2})
    sim.models["big"] = promised("big", scaling=scaling)
    sim.heartbeat()
    sim.step()
    assert sorted(_preempted(sim)) == sorted(ids.values())
    waits = [_scheduled(sim, r.id) for r in sim.live("big")]
    assert sorted(w.split(" to stop")[0] for w in waits) == ["waits for a on n1", "waits for b on n2"], waits
    _gone(sim, *ids.values())
    assert sorted(n for r in sim.live("big") for n in r.node_ids()) == ["n1", "n2"]


def test_a_replica_beyond_min_does_not_evict_an_idle_replica_of_a_higher_priority() -> None:
    """Idle eviction follows the same ranks: a promised model's replica for load beyond min ranks as on-demand
    (0), below an idle on-demand model of priority 50."""
    sim = Sim([on_demand("mid", priority=50)], [node("n1"), node("n2")], timings=TIMINGS)
    ids = _start(sim, "mid")
    scaling = on_demand("x").scaling.model_copy(update={"min": 1, "max": 2, "target_in_flight": 1.0,
                                                        "scale_up_after": 5.0})
    sim.models["busy"] = promised("busy", scaling=scaling)
    sim.run(10)
    (first,) = sim.live("busy")
    sim.advance(400)  # mid: ready long ago, unused for long: idle eviction's own rules would take it
    sim.last_used[ids["mid"]] = sim.now - 100
    sim.outstanding[first.id] = 4
    sim.run(10)
    assert len(sim.live("busy")) == 2, "scaled up on load"
    assert [i for i in sim.intents if isinstance(i, Evict)] == [], "mid outranks busy's replica beyond min"
    assert sim.live("mid")


def test_while_its_victim_drains_idle_eviction_takes_nothing_more_for_it() -> None:
    sim = Sim([on_demand("a"), on_demand("b")], [node("n1"), node("n2")], timings=TIMINGS)
    ids = _start(sim, "a", "b")
    sim.advance(400)  # both ready long ago; a used just now, b 20 s ago (idle eviction waits for 30 s)
    sim.last_used[ids["a"]] = sim.now - 5
    sim.last_used[ids["b"]] = sim.now - 20
    sim.recent[ids["b"]] = 5.0  # dearer to lose than a
    sim.heartbeat()
    _want(sim, promised("big"))
    assert _preempted(sim) == [ids["a"]]
    sim.outstanding[ids["a"]] = 1  # a drains
    sim.run(15, every=5, keep=[(ids["a"], 0)])  # meanwhile b has been unused for 35 s
    assert [i for i in sim.intents if isinstance(i, Evict)] == [], "b stopped too: two victims for one replica"
    assert sim.live("b")
