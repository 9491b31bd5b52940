"""The room preemption makes is held for the model it was made for while the rest of its victims drain: a lower
priority replica asking meanwhile is not placed into the part already freed."""

from __future__ import annotations

from tests.clusters import node
from tests.reconcile.harness import Sim
from tests.reconcile.test_preemption import TIMINGS, _preempted, _start, _want, on_demand, promised


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
