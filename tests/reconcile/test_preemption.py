"""Preemption: a replica a higher-priority model is missing takes the room of lower-priority replicas with nothing in
flight, idle or not; never the same priority, never a pinned model; the cheapest to lose, and never more than needed.

The first test shows preemption happening at all, so that the "not preempted" assertions are not passing because
nothing is ever preempted. Time is the harness's fake clock.
"""

from __future__ import annotations

from llmgw.config.server import PROMISED, ModelSpec
from llmgw.core.conditions import ConditionType, get_condition
from llmgw.core.reasons import Reason
from llmgw.placement.checks import Request
from llmgw.placement.snapshot import build_snapshot
from llmgw.reconcile.apply import Count, State, apply
from llmgw.reconcile.intents import Evict, Preempt
from llmgw.reconcile.preemption import _Fits
from llmgw.reconcile.world import Timings
from llmgw.records.state import ReplicaRecord
from tests.clusters import model, node
from tests.reconcile.harness import Sim

# eviction would take an idle replica after 30 s; these tests keep victims busy (used 5 s ago) and young (ready for
# less than evict_protect), so only preemption can make room
TIMINGS = Timings(evict_idle_after=30.0, evict_protect=300.0, demand_window=60.0, drain_timeout=30.0)


def on_demand(name: str, gpus: int = 8, nodes: int = 1, **kw: object) -> ModelSpec:
    return model(name, gpus_per_shard=gpus, nodes=nodes, min_=0, max_=1, idle=3600).model_copy(update=kw)


def promised(name: str, gpus: int = 8, nodes: int = 1, **kw: object) -> ModelSpec:
    return model(name, gpus_per_shard=gpus, nodes=nodes, min_=1, max_=1).model_copy(update=kw)


def _start(sim: Sim, *names: str) -> dict[str, str]:
    """Bring these models up (asking for the on-demand ones), then use each 5 s ago: model -> ready replica id."""
    out = sim.start(*names)
    sim.advance(10)
    for rid in out.values():
        sim.last_used[rid] = sim.now - 5
    return out


def _want(sim: Sim, spec: ModelSpec) -> str:
    """The catalog gains (or changes to) this model; a pass runs; its replica not placed yet."""
    sim.models[spec.name] = spec
    if spec.on_demand:
        sim.demand[spec.name] = sim.now
    sim.heartbeat()
    sim.step()
    (r,) = sim.live(spec.name)
    return r.id


def _preempted(sim: Sim) -> list[str]:
    out: list[str] = []
    for i in sim.intents:
        if isinstance(i, Preempt) and i.replica_id not in out:
            out.append(i.replica_id)
    return out


def _scheduled(sim: Sim, rid: str) -> str:
    c = get_condition(sim.replicas[rid].conditions, ConditionType.Scheduled)
    assert c is not None
    return c.message


def _gone(sim: Sim, *victims: str) -> None:
    """The victims' shards stop: a few passes while their nodes report them gone."""
    sim.heartbeat()
    sim.step()
    sim.run(3)
    for v in victims:
        assert v not in sim.replicas


def test_a_promised_replica_preempts_a_busy_young_on_demand_one_which_drains_then_stops() -> None:
    sim = Sim([on_demand("od")], [node("n1")], timings=TIMINGS)
    ids = _start(sim, "od")
    rid = _want(sim, promised("big"))
    assert not sim.replicas[rid].placed
    assert not [i for i in sim.intents if isinstance(i, Evict)], "used 5 s ago and young: eviction may not take it"
    assert _preempted(sim) == [ids["od"]]
    victim = sim.replicas[ids["od"]]
    assert victim.stop is not None and victim.stop.reason == Reason.Preempted and victim.stop.for_model == "big"
    assert sim.ready_reason(victim) == Reason.Preempted
    said = f"replica {ids['od']} of od preempted for big (priority {PROMISED} over 0): drains, then stops"
    assert said in sim.events
    c = get_condition(sim.replicas[rid].conditions, ConditionType.Scheduled)
    assert c is not None and c.reason == Reason.WaitingForRoom
    assert c.message.startswith(f"waits for od on n1 to stop: nothing in flight (preempted: priority {PROMISED} "
                                "over 0); ")
    _gone(sim, ids["od"])
    assert sim.replicas[rid].node_ids() == ["n1"]
    assert sim.live("od") == [], "nobody asked for od again"


def test_the_wait_names_requests_in_flight_and_the_drain_time_left() -> None:
    sim = Sim([on_demand("od")], [node("n1")], timings=TIMINGS)
    ids = _start(sim, "od")
    rid = _want(sim, promised("big"))
    assert _preempted(sim) == [ids["od"]]
    sim.outstanding[ids["od"]] = 1  # a request routed before the routing table dropped it
    sim.advance(4)
    sim.heartbeat(keep=[(ids["od"], 0)])
    sim.step()
    assert _scheduled(sim, rid).startswith("waits for od on n1 to drain: 1 request in flight, at most 26 s")
    sim.outstanding[ids["od"]] = 2
    sim.advance(10)
    sim.heartbeat(keep=[(ids["od"], 0)])
    sim.step()
    assert _scheduled(sim, rid).startswith("waits for od on n1 to drain: 2 requests in flight, at most 16 s")
    sim.advance(20)  # past drain_timeout: its engine is stopped whatever is in flight
    sim.heartbeat(keep=[(ids["od"], 0)])
    sim.step()
    assert _scheduled(sim, rid).startswith("waits for od on n1 to stop: drain time over, 2 requests in flight cut "
                                           "off"), "the requests still counted are not said to be none"
    assert _preempted(sim) == [ids["od"]], "one round at a time: nothing more is preempted meanwhile"


def test_while_its_victims_drain_no_further_victims_are_taken() -> None:
    # two nodes, each with a replica big could have; the first chosen drains for a while: the other stays up
    sim = Sim([on_demand("a"), on_demand("b")], [node("n1"), node("n2")], timings=TIMINGS)
    ids = _start(sim, "a", "b")
    _want(sim, promised("big"))
    (first,) = _preempted(sim)
    sim.outstanding[first] = 1
    sim.run(20, every=5, keep=[(first, 0)])
    assert _preempted(sim) == [first], "one round at a time: nothing more is preempted meanwhile"
    assert {r.id for r in sim.live("a") + sim.live("b")} == set(ids.values()) - {first}


def test_a_replica_with_requests_in_flight_is_not_preempted() -> None:
    sim = Sim([on_demand("od")], [node("n1")], timings=TIMINGS)
    ids = _start(sim, "od")
    sim.outstanding[ids["od"]] = 1
    rid = _want(sim, promised("big"))
    sim.run(20, every=5)
    assert _preempted(sim) == []
    sim.outstanding[ids["od"]] = 0
    sim.step()
    assert _preempted(sim) == [ids["od"]]
    assert not sim.replicas[rid].placed


def test_the_same_priority_never_preempts() -> None:
    sim = Sim([on_demand("od")], [node("n1")], timings=TIMINGS)
    _start(sim, "od")
    _want(sim, on_demand("other"))  # on demand too: only idle eviction, and od is not idle
    sim.run(20, every=5)
    assert _preempted(sim) == []
    sim2 = Sim([promised("kept")], [node("n1")], timings=TIMINGS)
    _start(sim2, "kept")
    _want(sim2, promised("big"))  # both promised: a promise never breaks another
    sim2.run(20, every=5)
    assert _preempted(sim2) == []


def test_a_pinned_model_is_never_preempted() -> None:
    sim = Sim([on_demand("od", pinned=True)], [node("n1")], timings=TIMINGS)
    _start(sim, "od")
    _want(sim, promised("big"))
    sim.run(20, every=5)
    assert _preempted(sim) == []


def test_a_configured_priority_orders_models_whatever_their_min() -> None:
    # an on-demand model of priority 200 outranks a promised one (100 by default) ...
    sim = Sim([promised("kept")], [node("n1")], timings=TIMINGS)
    ids = _start(sim, "kept")
    _want(sim, on_demand("urgent", priority=200))
    assert _preempted(sim) == [ids["kept"]]
    # ... and a promised model of priority -1 is below an on-demand one (0)
    sim2 = Sim([promised("cheap", priority=-1)], [node("n1")], timings=TIMINGS)
    ids2 = _start(sim2, "cheap")
    _want(sim2, on_demand("od"))
    assert _preempted(sim2) == [ids2["cheap"]]
    # the lower one is never taken back: its replacement waits
    sim2.run(30, every=5)
    assert _preempted(sim2) == [ids2["cheap"]]


def test_the_cheapest_to_lose_goes_fewest_recent_requests_first() -> None:
    sim = Sim([on_demand("a"), on_demand("b")], [node("n1"), node("n2")], timings=TIMINGS)
    ids = _start(sim, "a", "b")
    sim.recent[ids["a"]] = 40.0
    sim.recent[ids["b"]] = 3.0
    sim.last_used[ids["b"]] = sim.now  # used just now: recent requests weigh first
    _want(sim, promised("big"))
    assert _preempted(sim) == [ids["b"]]


def test_among_equally_used_the_smallest_goes_then_the_longest_unused() -> None:
    sim = Sim([on_demand("small", gpus=6), on_demand("large", gpus=8), on_demand("old", gpus=8)],
              [node("n1"), node("n2"), node("n3")], timings=TIMINGS)
    ids = _start(sim, "small", "large", "old")
    sim.last_used[ids["old"]] = sim.now - 100
    _want(sim, promised("big", gpus=4))  # any one of them frees enough
    assert _preempted(sim) == [ids["small"]]
    sim2 = Sim([on_demand("large", gpus=8), on_demand("old", gpus=8)], [node("n1"), node("n2")], timings=TIMINGS)
    ids2 = _start(sim2, "large", "old")
    sim2.last_used[ids2["old"]] = sim2.now - 100
    _want(sim2, promised("big", gpus=8))
    assert _preempted(sim2) == [ids2["old"]]


def test_never_more_victims_than_needed_one_large_before_two_small() -> None:
    sim = Sim([on_demand("a", gpus=4), on_demand("b", gpus=4), on_demand("c", gpus=8)], [node("n1"), node("n2")],
              timings=TIMINGS)
    ids = _start(sim, "a", "b", "c")
    assert sim.replicas[ids["a"]].node_ids() == sim.replicas[ids["b"]].node_ids() != sim.replicas[ids["c"]].node_ids()
    sim.recent[ids["c"]] = 10.0  # dearer than a and b together, but one victim beats two
    _want(sim, promised("big", gpus=8))
    assert _preempted(sim) == [ids["c"]]


def test_a_set_of_victims_when_no_single_one_frees_enough() -> None:
    sim = Sim([on_demand("a", gpus=4), on_demand("b", gpus=4), on_demand("c", gpus=2), on_demand("d", gpus=6)],
              [node("n1"), node("n2")], timings=TIMINGS)
    ids = _start(sim, "a", "b", "c", "d")
    by_node = {m: sim.replicas[r].node_ids()[0] for m, r in ids.items()}
    assert by_node["a"] == by_node["b"] and by_node["c"] == by_node["d"] != by_node["a"]
    sim.recent[ids["a"]] = sim.recent[ids["b"]] = 1.0  # n1's pair costs more than n2's
    _want(sim, promised("big", gpus=8))
    assert sorted(_preempted(sim)) == sorted([ids["c"], ids["d"]])


def test_a_set_is_pruned_to_what_is_needed() -> None:
    # n1 holds a (2), b (2), c (4): 6 cards are needed; a and c or b and c free enough, all three are not needed
    sim = Sim([on_demand("a", gpus=2), on_demand("b", gpus=2), on_demand("c", gpus=4)], [node("n1")],
              timings=TIMINGS)
    ids = _start(sim, "a", "b", "c")
    sim.recent[ids["a"]] = 5.0
    _want(sim, promised("big", gpus=6))
    assert sorted(_preempted(sim)) == sorted([ids["b"], ids["c"]])


def test_victims_gathered_node_by_node_are_pruned_to_what_is_needed() -> None:
    # big takes two whole nodes of one fabric: x (cheapest, alone on ib-b) is gathered first, but only y and z help
    fab = {"n1": "ib-b", "n2": "ib-a", "n3": "ib-a"}
    sim = Sim([on_demand("x"), on_demand("y"), on_demand("z")], [node(n, fabric=f) for n, f in fab.items()],
              timings=TIMINGS)
    ids = _start(sim, "x") | _start(sim, "y", "z")
    on_b = next(m for m, r in ids.items() if sim.replicas[r].node_ids() == ["n1"])
    for m, r in ids.items():
        sim.recent[r] = 0.0 if m == on_b else 1.0
    _want(sim, promised("big", gpus=8, nodes=2))
    assert sorted(_preempted(sim)) == sorted(r for m, r in ids.items() if m != on_b)


def test_multi_node_victims_only_when_no_single_node_set_frees_enough() -> None:
    fab = {"n1": "ib-a", "n2": "ib-a", "n3": "ib-b"}
    sim = Sim([on_demand("wide", gpus=8, nodes=2), on_demand("one", gpus=8)],
              [node(n, fabric=f) for n, f in fab.items()], timings=TIMINGS)
    ids = _start(sim, "wide") | _start(sim, "one")  # the wide one first: it takes ib-a's two nodes
    assert sim.replicas[ids["one"]].node_ids() == ["n3"]
    sim.recent[ids["one"]] = 50.0  # the single-node victim is dearer, and still goes first
    _want(sim, promised("big", gpus=8))
    assert _preempted(sim) == [ids["one"]]
    # a request only the two-node replica's nodes can hold takes it
    sim2 = Sim([on_demand("wide", gpus=8, nodes=2), on_demand("one", gpus=8)],
               [node(n, fabric=f) for n, f in fab.items()], timings=TIMINGS)
    ids2 = _start(sim2, "wide") | _start(sim2, "one")
    _want(sim2, promised("big", gpus=8, nodes=2))
    assert _preempted(sim2) == [ids2["wide"]]


def test_nothing_is_preempted_when_no_set_makes_room() -> None:
    # n1: an on-demand replica on 4 cards beside a promised one on the other 4; big needs all 8
    sim = Sim([on_demand("od", gpus=4), promised("kept", gpus=4)], [node("n1")], timings=TIMINGS)
    ids = _start(sim, "od", "kept")
    _want(sim, promised("big", gpus=8))
    sim.run(30, every=5)
    assert _preempted(sim) == []
    assert sim.replicas[ids["od"]].ready


def test_idle_eviction_never_takes_a_higher_priority_or_pinned_replica() -> None:
    for kw in ({"priority": 50}, {"pinned": True}):
        sim = Sim([on_demand("a", **kw)], [node("n1")], timings=TIMINGS)
        ids = _start(sim, "a")
        sim.advance(400)
        sim.last_used[ids["a"]] = sim.now - 100  # idle and old: eviction would take it
        sim.heartbeat()
        _want(sim, on_demand("b"))
        sim.run(30, every=10)
        assert not [i for i in sim.intents if isinstance(i, Evict)], kw
    sim = Sim([on_demand("a")], [node("n1")], timings=TIMINGS)  # the same, unpinned and of one priority: evicted
    ids = _start(sim, "a")
    sim.advance(400)
    sim.last_used[ids["a"]] = sim.now - 100
    sim.heartbeat()
    _want(sim, on_demand("b"))
    assert [i.replica_id for i in sim.intents if isinstance(i, Evict)] == [ids["a"]]


def test_each_preemption_is_counted_with_both_models() -> None:
    sim = Sim([on_demand("od")], [node("n1")], timings=TIMINGS)
    ids = _start(sim, "od")
    sim.models["big"] = promised("big")
    state = State(now=sim.now, models=sim.models, nodes=sim.nodes, replicas=sim.replicas)
    out = apply(state, [Preempt(ids["od"], "big", 0, PROMISED)])
    counts = [e for e in out.effects if isinstance(e, Count)]
    assert Count("od", "stop", "Preempted") in counts
    assert Count("od", "preempted", "big") in counts


def test_the_what_if_of_replicas_gone_is_the_snapshot_rebuilt_without_them() -> None:
    """Victims are tried on the pass's snapshot with only their nodes counted again: the same picture as a snapshot
    rebuilt whole without them, for a multi-node replica and two single-node ones on a shared node."""
    sim = Sim([on_demand("a", gpus=4), on_demand("c", gpus=4), on_demand("wide", gpus=8, nodes=2)],
              [node(f"n{i}", fabric="ib-a") for i in range(4)], timings=TIMINGS)
    n3 = sim.nodes["n3"]
    sim.nodes["n3"] = n3.model_copy(update={"report": n3.report.model_copy(update={"weights": ["/w"], "peer_port": 7})})
    ids = _start(sim, "wide") | _start(sim, "a", "c")
    w = sim.world()
    snap = build_snapshot(w.nodes, w.replicas, w.models, w.now)
    on_node: dict[str, list[ReplicaRecord]] = {}
    for r in w.replicas:
        for nid in {a.node_id for a in r.assignments}:
            on_node.setdefault(nid, []).append(r)
    fits = _Fits(Request(replica_id="x", model=promised("x")), snap, on_node, {n.id: n for n in w.nodes}, w)
    for gone in (["wide"], ["a", "c"], ["wide", "a"]):
        gone_ids = {ids[g] for g in gone}
        expected = build_snapshot(w.nodes, [r for r in w.replicas if r.id not in gone_ids], w.models, w.now)
        assert fits.without([r for r in w.replicas if r.id in gone_ids]) == expected and expected != snap, gone


def test_the_room_made_goes_to_the_higher_priority_not_to_an_older_lower_one() -> None:
    # od2 (on demand) has waited longer than big for the same node; when od's shard is gone, big is placed first
    sim = Sim([on_demand("od")], [node("n1")], timings=TIMINGS)
    ids = _start(sim, "od")
    older = _want(sim, on_demand("od2"))
    sim.advance(1)
    rid = _want(sim, promised("big"))
    assert _preempted(sim) == [ids["od"]]
    _gone(sim, ids["od"])
    assert _preempted(sim) == [ids["od"]], "od2 took the room, and was preempted in turn"
    assert sim.replicas[rid].node_ids() == ["n1"]
    assert not sim.replicas[older].placed


def test_a_replica_beyond_min_scaled_up_on_load_preempts_only_with_a_priority_set() -> None:
    """The promise is `min`: a promised model's extra replica for load is a convenience, unless its priority says
    otherwise."""
    for priority, taken in ((None, False), (PROMISED, True)):
        sim = Sim([on_demand("od")], [node("n1"), node("n2")], timings=TIMINGS)
        ids = _start(sim, "od")
        scaling = model().scaling.model_copy(update={"min": 1, "max": 2, "target_in_flight": 1.0,
                                                     "scale_up_after": 5.0})
        big = promised("big", priority=priority, scaling=scaling)
        sim.models["big"] = big
        sim.run(10)
        (first,) = sim.live("big")
        assert sim.replicas[first.id].ready and _preempted(sim) == []
        sim.outstanding[first.id] = 4
        sim.run(10)
        assert len(sim.live("big")) == 2, "scaled up on load"
        assert _preempted(sim) == ([ids["od"]] if taken else []), priority
