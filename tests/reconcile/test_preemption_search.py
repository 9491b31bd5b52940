"""Preemption finds the victim that makes room among many candidates: the what-ifs it tries are bounded, so they
are spent on replicas whose nodes could take the request once freed, not on the cheapest anywhere."""

from __future__ import annotations

from tests.clusters import model, node
from tests.reconcile.harness import Sim
from tests.reconcile.test_preemption import TIMINGS, _preempted, promised


def test_the_one_victim_on_the_only_node_of_the_class_asked_for_is_found_among_many_cheaper() -> None:
    nodes = [node(f"h{i:02d}") for i in range(40)] + [node("a1", cls="A100-80G")]
    low = model("low", gpus_per_shard=8, cls=None, min_=41, max_=41).model_copy(update={"priority": -1})
    sim = Sim([low], nodes, timings=TIMINGS)
    sim.step()
    sim.advance(5)
    sim.heartbeat()
    sim.step()
    on_a1 = [r.id for r in sim.live("low") if r.node_ids() == ["a1"]]
    assert len(on_a1) == 1 and all(r.ready for r in sim.live("low"))
    for r in sim.live("low"):
        sim.recent[r.id] = 1.0
    sim.recent[on_a1[0]] = 50.0  # the dearest to lose, and the only one whose going makes room
    big = promised("big", gpus=8).model_copy(update={"profile": promised("big").profile.model_copy(
        update={"gpu_class": "A100-80G"})})
    sim.models["big"] = big
    sim.step()
    assert _preempted(sim) == on_a1
