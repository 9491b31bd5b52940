"""Eviction: stop one idle replica of another on-demand model, and only when that makes room for a request.

Each rule has a test that fails without it; the first test shows eviction happening at all, so that the
"not evicted" assertions are not passing because nothing is ever evicted.
"""

from __future__ import annotations

from llmgw.config.server import ModelSpec
from llmgw.core.reasons import Reason
from llmgw.reconcile.intents import Evict
from llmgw.reconcile.world import Timings
from llmgw.records.state import ReplicaRecord, StopRequest
from tests.clusters import model, node
from tests.reconcile.harness import Sim

TIMINGS = Timings(evict_idle_after=30.0, evict_protect=300.0, demand_window=60.0)


def on_demand(name: str, gpus: int = 8, nodes: int = 1) -> ModelSpec:
    return model(name, gpus_per_shard=gpus, nodes=nodes, min_=0, max_=1, idle=3600)


def _start(sim: Sim, *names: str) -> dict[str, str]:
    return sim.start(*names)


def _settle(sim: Sim, ids: dict[str, str], idle_for: float = 60.0, age: float = 400.0) -> None:
    """Time passes: replicas have been Ready for `age`, and last used `idle_for` ago."""
    sim.advance(age)
    for rid in ids.values():
        sim.last_used[rid] = sim.now - idle_for
    sim.heartbeat()
    sim.step()


def _ask(sim: Sim, name: str) -> None:
    sim.demand[name] = sim.now
    sim.step()


def _evicted(sim: Sim) -> list[str]:
    """Every replica ever evicted, reaped or not, in the order it happened."""
    out: list[str] = []
    for i in sim.intents:
        if isinstance(i, Evict) and i.replica_id not in out:
            out.append(i.replica_id)
    return out


def test_an_idle_on_demand_replica_makes_room_and_then_the_request_is_placed() -> None:
    sim = Sim([on_demand("a"), on_demand("b")], [node("n1")], timings=TIMINGS)
    ids = _start(sim, "a")
    _settle(sim, ids)
    _ask(sim, "b")
    (b,) = sim.live("b")
    assert not b.placed
    assert _evicted(sim) == [ids["a"]]
    victim = sim.replicas[ids["a"]]
    assert victim.stop is not None
    assert victim.stop.model_copy(update={"at": 0.0}) == StopRequest(
        reason=Reason.Evicted, message="idle, to make room for b", for_model="b")
    assert sim.started_at <= victim.stop.at <= sim.now  # when it was decided: the drain runs from there
    assert sim.ready_reason(victim) == Reason.Evicted and not victim.ready
    assert any(e == f"replica {ids['a']} of a evicted: idle, to make room for b" for e in sim.events)
    # its cards are held until its shard is gone; then the request lands where it was
    sim.advance(3)
    sim.heartbeat(keep=[(ids["a"], 0)])
    sim.step()
    assert not sim.replicas[b.id].placed
    sim.run(3)
    assert ids["a"] not in sim.replicas
    assert sim.replicas[b.id].node_ids() == ["n1"]
    assert sim.live("a") == [], "nobody asked for a again"


def test_a_model_at_min_1_is_never_evicted() -> None:
    sim = Sim([model("kept", gpus_per_shard=8, min_=1, max_=1), on_demand("b")], [node("n1")], timings=TIMINGS)
    ids = _start(sim, "kept")
    _settle(sim, ids)
    _ask(sim, "b")
    sim.run(600, every=30)
    assert _evicted(sim) == []
    assert sim.replicas[ids["kept"]].ready
    assert not sim.live("b")[0].placed


def test_a_promise_outranks_a_convenience_a_min_1_replica_evicts_an_idle_on_demand_one() -> None:
    """The defect: a replacement for a model at min 1 waited behind an idle on-demand replica until that one's
    idle timeout (10 minutes in llmgw dev)."""
    sim = Sim([on_demand("a"), model("later", gpus_per_shard=8, min_=0, max_=0)], [node("n1")], timings=TIMINGS)
    ids = _start(sim, "a")
    _settle(sim, ids)
    sim.models["later"] = model("later", gpus_per_shard=8, min_=1, max_=1)
    sim.step()
    (later,) = sim.live("later")
    assert not later.placed
    assert _evicted(sim) == [ids["a"]]
    cond = next(c for c in sim.replicas[later.id].conditions if c.type == "Scheduled")
    assert f"waiting for idle replica {ids['a']} of a, evicted to make room" in cond.message
    sim.advance(3)
    sim.heartbeat(keep=[(ids["a"], 0)])
    sim.step()
    assert "waiting for idle replica" in next(
        c for c in sim.replicas[later.id].conditions if c.type == "Scheduled").message
    sim.run(3)
    assert sim.replicas[later.id].node_ids() == ["n1"]


def test_a_min_1_replacement_still_never_evicts_a_busy_or_young_replica() -> None:
    sim = Sim([on_demand("a"), model("later", gpus_per_shard=8, min_=0, max_=0)], [node("n1")], timings=TIMINGS)
    ids = _start(sim, "a")
    _settle(sim, ids, idle_for=5.0)  # used 5 s ago: not idle
    sim.models["later"] = model("later", gpus_per_shard=8, min_=1, max_=1)
    sim.run(20, every=5)
    assert _evicted(sim) == []


def test_a_multi_node_replica_is_never_evicted() -> None:
    sim = Sim([on_demand("wide", gpus=8, nodes=2), on_demand("b")],
              [node("n1", fabric="ib-a"), node("n2", fabric="ib-a")], timings=TIMINGS)
    ids = _start(sim, "wide")
    assert sim.replicas[ids["wide"]].node_ids() == ["n1", "n2"]
    _settle(sim, ids)
    _ask(sim, "b")
    sim.run(300, every=30)
    assert _evicted(sim) == []
    assert sim.replicas[ids["wide"]].ready


def test_one_eviction_at_a_time() -> None:
    sim = Sim([on_demand("a"), on_demand("c"), on_demand("b"), on_demand("d")], [node("n1"), node("n2")],
              timings=TIMINGS)
    ids = _start(sim, "a", "c")
    _settle(sim, ids)
    sim.demand["b"] = sim.demand["d"] = sim.now
    sim.step()
    assert len(_evicted(sim)) == 1, "two requests, two idle replicas: still one eviction per round"
    first = _evicted(sim)[0]
    # while the victim is still stopping, nothing more is evicted
    for _ in range(3):
        sim.advance(3)
        sim.heartbeat(keep=[(first, 0)])
        sim.step()
        assert _evicted(sim) == [first]
    # once it is gone, one request lands and the next eviction may happen
    sim.demand["b"] = sim.demand["d"] = sim.now
    sim.run(3)
    placed = [r for m in ("b", "d") for r in sim.live(m) if r.placed]
    assert len(placed) == 1
    assert first not in sim.replicas
    assert len(_evicted(sim)) == 2 and _evicted(sim)[0] == first


def test_a_replica_with_no_reported_usage_is_not_idle() -> None:
    sim = Sim([on_demand("a"), on_demand("b")], [node("n1")], timings=TIMINGS)
    ids = _start(sim, "a")
    _settle(sim, ids)
    del sim.last_used[ids["a"]]  # e.g. the router restarted: unknown, not idle
    _ask(sim, "b")
    sim.run(120, every=30)
    assert _evicted(sim) == []


def test_a_recently_used_replica_is_not_evicted() -> None:
    sim = Sim([on_demand("a"), on_demand("b")], [node("n1")], timings=TIMINGS)
    ids = _start(sim, "a")
    _settle(sim, ids, idle_for=TIMINGS.evict_idle_after - 1)
    _ask(sim, "b")
    assert _evicted(sim) == []
    sim.advance(1)
    sim.demand["b"] = sim.now
    sim.heartbeat()
    sim.step()
    assert _evicted(sim) == [ids["a"]]


def test_a_replica_ready_for_less_than_evict_protect_is_not_evicted() -> None:
    # two on-demand models on room for one would otherwise take turns evicting each other
    sim = Sim([on_demand("a"), on_demand("b")], [node("n1")], timings=TIMINGS)
    ids = _start(sim, "a")
    ready_at = sim.replicas[ids["a"]].ready_at
    assert ready_at is not None
    _settle(sim, ids, age=TIMINGS.evict_protect - 10)
    assert sim.now - ready_at < TIMINGS.evict_protect
    _ask(sim, "b")
    assert _evicted(sim) == []
    sim.advance(ready_at + TIMINGS.evict_protect - sim.now)
    sim.demand["b"] = sim.now
    sim.heartbeat()
    sim.step()
    assert _evicted(sim) == [ids["a"]]


def test_no_ping_pong_the_newly_placed_model_is_protected_in_turn() -> None:
    sim = Sim([on_demand("a"), on_demand("b")], [node("n1")], timings=TIMINGS)
    ids = _start(sim, "a")
    _settle(sim, ids)
    _ask(sim, "b")
    sim.run(10)
    (b,) = sim.live("b")
    assert sim.replicas[b.id].ready
    sim.last_used[b.id] = sim.now
    sim.advance(60)
    _ask(sim, "a")  # a is wanted back at once: b was just loaded and is not a victim yet
    sim.run(200, every=20)
    assert _evicted(sim) == [ids["a"]], "b was evicted in turn"
    assert sim.replicas[b.id].ready


def test_a_replica_with_requests_in_flight_is_not_evicted() -> None:
    sim = Sim([on_demand("a"), on_demand("b")], [node("n1")], timings=TIMINGS)
    ids = _start(sim, "a")
    _settle(sim, ids)
    sim.outstanding[ids["a"]] = 1  # a long generation that has not finished: its last use is stale
    _ask(sim, "b")
    sim.run(60, every=20)
    assert _evicted(sim) == []
    sim.outstanding[ids["a"]] = 0
    sim.demand["b"] = sim.now
    sim.step()
    assert _evicted(sim) == [ids["a"]]


def test_nothing_is_evicted_when_evicting_would_not_make_room() -> None:
    # n1: an idle on-demand replica on 4 cards beside a min-1 replica on the other 4; b needs all 8
    sim = Sim([on_demand("a", gpus=4), model("kept", gpus_per_shard=4, min_=1, max_=1), on_demand("b")],
              [node("n1")], timings=TIMINGS)
    ids = _start(sim, "a", "kept")
    _settle(sim, ids)
    _ask(sim, "b")
    sim.run(300, every=30)
    assert _evicted(sim) == []
    assert sim.replicas[ids["a"]].ready


def test_the_victim_is_one_whose_removal_makes_room_even_if_another_is_idler() -> None:
    sim = Sim([on_demand("a", gpus=4), model("kept", gpus_per_shard=4, min_=1, max_=1), on_demand("c"),
               on_demand("b")], [node("n1"), node("n2")], timings=TIMINGS)
    ids = _start(sim, "kept", "a", "c")
    assert sim.replicas[ids["c"]].node_ids() == ["n2"] and sim.replicas[ids["a"]].node_ids() == ["n1"]
    _settle(sim, ids)
    sim.last_used[ids["a"]] = sim.now - 3000  # idler, but freeing its 4 cards does not fit 8
    _ask(sim, "b")
    assert _evicted(sim) == [ids["c"]]


def test_the_least_recently_used_victim_goes_first() -> None:
    sim = Sim([on_demand("a"), on_demand("c"), on_demand("b")], [node("n1"), node("n2")], timings=TIMINGS)
    ids = _start(sim, "a", "c")
    _settle(sim, ids)
    sim.last_used[ids["c"]] = sim.now - 500
    sim.last_used[ids["a"]] = sim.now - 100
    _ask(sim, "b")
    assert _evicted(sim) == [ids["c"]]


def test_the_what_if_of_a_replica_gone_is_the_snapshot_rebuilt_without_it() -> None:
    """Eviction tries each candidate on the pass's snapshot with one node counted again, not on a snapshot rebuilt
    whole per candidate: both must be the same picture, with a multi-node replica and a shared node beside it."""
    from llmgw.placement.snapshot import build_snapshot
    from llmgw.reconcile.eviction import without

    sim = Sim([on_demand("a", gpus=4), on_demand("c", gpus=4), on_demand("wide", gpus=8, nodes=2)],
              [node(f"n{i}", fabric="ib-a") for i in range(4)], timings=TIMINGS)
    # n3 holds weights its fabric peers may copy: a node's view names them, however it is counted
    n3 = sim.nodes["n3"]
    sim.nodes["n3"] = n3.model_copy(update={"report": n3.report.model_copy(update={"weights": ["/w"], "peer_port": 7})})
    ids = _start(sim, "a", "c", "wide")
    w = sim.world()
    current = {r.id: r for r in w.replicas}
    snap = build_snapshot(w.nodes, w.replicas, w.models, w.now)
    on_node: dict[str, list[ReplicaRecord]] = {}
    for r in w.replicas:
        for a in r.assignments:
            on_node.setdefault(a.node_id, []).append(r)
    for name in ("a", "c"):
        gone = current[ids[name]]
        others = [r for r in w.replicas if r.id != gone.id]
        expected = build_snapshot(w.nodes, others, w.models, w.now)
        assert without(snap, gone, on_node, {n.id: n for n in w.nodes}, w) == expected
        assert expected != snap  # the replica held something: the comparison is not of two equal pictures
