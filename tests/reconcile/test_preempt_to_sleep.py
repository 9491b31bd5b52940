"""Preempt to sleep: where a higher priority would stop a lower one's replica, it is put to sleep instead when it
can; the higher one takes its GPUs while it sleeps on under it, and it wakes at wake cost once they are free again.
A victim that cannot sleep is drained and stopped as before. Pure, with a fake clock."""

from __future__ import annotations

from llmgw.config.server import ModelSpec
from llmgw.config.serving import SleepConfig
from llmgw.core.reasons import Reason
from llmgw.reconcile.intents import Preempt
from llmgw.reconcile.sleep_intents import Sleep, Wake
from llmgw.reconcile.world import Timings
from tests.clusters import model, node
from tests.reconcile.harness import Sim

TIMINGS = Timings(evict_idle_after=30.0, evict_protect=300.0, demand_window=60.0, drain_timeout=30.0)


def od(sleep: bool) -> ModelSpec:
    m = model("od", gpus_per_shard=8, min_=0, max_=1, idle=3600, source="/models/od")
    return m.model_copy(update={"sleep": SleepConfig() if sleep else None})


def big() -> ModelSpec:
    return model("big", gpus_per_shard=8, min_=1, max_=1, source="/models/big")


def beat(sim: Sim) -> None:
    sim.heartbeat(overrides={(r.id, 0): "sleeping" for r in sim.replicas.values() if r.sleep_level})


def busy_od(sleep: bool) -> tuple[Sim, str]:
    """One node of eight GPUs, all of them od's (used 5 s ago); then the promised model "big" arrives."""
    sim = Sim([od(sleep)], [node("n1")], timings=TIMINGS)
    sim.demand["od"] = sim.now
    sim.step()
    sim.advance(5)
    sim.heartbeat()
    sim.step()
    (r,) = sim.live("od")
    assert r.ready
    sim.last_used[r.id] = sim.now - 5
    sim.models["big"] = big()
    beat(sim)
    sim.step()
    return sim, r.id


def test_a_victim_that_can_sleep_sleeps_and_the_higher_priority_takes_its_gpus() -> None:
    sim, rid = busy_od(sleep=True)
    assert not any(isinstance(i, Preempt) for i in sim.intents)
    assert any(isinstance(i, Sleep) and i.replica_id == rid and i.for_model == "big" for i in sim.intents)
    r = sim.replicas[rid]
    assert r.sleep_level == 1 and r.slept_for == "big" and r.stop is None
    assert any("asleep at level 1: preempted for big (priority 100 over 0)" in e for e in sim.events), sim.events
    sim.advance(1)
    beat(sim)
    sim.step()
    (b,) = sim.live("big")
    assert b.placed and b.assignments[0].gpus == r.assignments[0].gpus
    sim.run(600, overrides={(rid, 0): "sleeping"})
    assert sim.replicas[rid].sleep_level == 1 and sim.replicas[rid].stop is None, "it sleeps on under big"


def test_it_wakes_once_the_higher_priority_is_gone_and_cannot_while_it_holds_the_gpus() -> None:
    sim, rid = busy_od(sleep=True)
    sim.advance(1)
    beat(sim)
    sim.step()
    sim.demand["od"] = sim.now  # asked for while big holds its GPUs: it cannot wake there
    beat(sim)
    sim.step()
    r = sim.replicas.get(rid)
    assert r is None or (r.stop is not None and r.stop.reason == Reason.Evicted and r.stop.for_model == "big")


def test_a_sleeper_whose_gpus_came_back_wakes_on_demand() -> None:
    sim, rid = busy_od(sleep=True)
    sim.advance(1)
    beat(sim)
    sim.step()
    del sim.models["big"]  # the pressure ends: big leaves the catalog, stops, and its GPUs come back
    sim.run(30, overrides={(rid, 0): "sleeping"})
    assert sim.live("big") == [] and sim.replicas[rid].sleep_level == 1
    sim.demand["od"] = sim.now
    out = sim.step()
    assert Wake(rid) in out
    sim.advance(1)
    sim.heartbeat()
    sim.step()
    assert sim.replicas[rid].ready


def test_a_victim_that_cannot_sleep_is_drained_and_stopped_as_before() -> None:
    sim, rid = busy_od(sleep=False)
    assert any(isinstance(i, Preempt) and i.replica_id == rid for i in sim.intents)
    r = sim.replicas[rid]
    assert r.sleep_level == 0 and r.stop is not None and r.stop.reason == Reason.Preempted


def test_a_request_before_the_higher_priority_is_placed_does_not_wake_it_onto_the_room_made() -> None:
    """Its GPUs are the waiting replica's from the moment it sleeps, not only once that replica is placed: woken
    there, it would be preempted again (drained and stopped) and the higher priority would wait for the drain."""
    sim, rid = busy_od(sleep=True)
    sim.advance(1)
    sim.demand["od"] = sim.now  # asked for in the pass before big is placed on its GPUs
    beat(sim)
    out = sim.step()
    assert Wake(rid) not in out and not any(isinstance(i, Preempt) for i in out)
    (b,) = sim.live("big")
    assert b.placed and b.assignments[0].gpus == sim.replicas[rid].assignments[0].gpus
    r = sim.replicas[rid]
    assert r.stop is not None and r.stop.reason == Reason.Evicted and r.stop.for_model == "big"


def test_a_preempted_sleeper_still_in_use_wakes_on_its_own_once_its_room_is_free_after_min_stay() -> None:
    """Its users had not left when its GPUs were taken: once the higher priority is gone, and after min_stay
    asleep (so sleep and wake do not take turns), it wakes without waiting for the next request to pay the wake."""
    sim, rid = busy_od(sleep=True)
    sim.advance(1)
    beat(sim)
    sim.step()
    del sim.models["big"]
    sim.run(30, overrides={(rid, 0): "sleeping"})
    assert sim.live("big") == [] and sim.replicas[rid].sleep_level == 1, "asleep less than min_stay (60 s)"
    woke = []
    for _ in range(10):
        sim.advance(5)
        beat(sim)
        woke += [i for i in sim.step() if isinstance(i, Wake)]
    assert woke == [Wake(rid)], woke
    sim.advance(1)
    sim.heartbeat()
    sim.step()
    assert sim.replicas[rid].ready


def test_a_preempted_sleeper_whose_users_had_left_sleeps_on() -> None:
    sim, rid = busy_od(sleep=True)
    sim.last_used[rid] = sim.now - 3600  # unused for its model's whole stop_unused_after
    sim.advance(1)
    beat(sim)
    sim.step()
    del sim.models["big"]
    sim.run(300, overrides={(rid, 0): "sleeping"})
    r = sim.replicas[rid]
    assert r.sleep_level == 1 and not any(isinstance(i, Wake) for i in sim.intents)
