"""The fastest way to ready: a request for a model with only sleepers wakes one, unless a load placement would make
is measured faster (World.ready_times); with no measurements, the sleeper wakes as before. The estimates are the
control plane's own measurements (control/nodes/ready_times.py), learnt here from the passes. Pure, with a fake
clock."""

from __future__ import annotations

from dataclasses import replace

from llmgw.config.server import ModelSpec
from llmgw.config.serving import SleepConfig
from llmgw.control.nodes.ready_times import ReadyTimes
from llmgw.core.reasons import Reason
from llmgw.reconcile.fastest import Key
from llmgw.reconcile.intents import Intent
from llmgw.reconcile.sleep_intents import Wake
from llmgw.reconcile.world import Timings, World
from tests.clusters import model as make_model
from tests.clusters import node
from tests.reconcile.harness import Sim

IDLE = 600.0
SOURCE = "/models/od"
SLOW, FAST = "A100-80G", "H100-80G"


def od() -> ModelSpec:
    m = make_model("od", min_=0, max_=1, idle=IDLE, gpus_per_shard=4, cls=None, source=SOURCE)
    return m.model_copy(update={"sleep": SleepConfig()})


class Measured(Sim):
    """The harness, with the estimates a pass reads set by the test (`ready`), or learnt from its passes (`times`)."""

    def __init__(self, ready: dict[Key, float] | None = None, learn: bool = False) -> None:
        super().__init__([od()], [node("n2", cls=SLOW, weights=(SOURCE,))], timings=Timings(demand_window=60.0))
        self.ready = ready or {}
        self.times = ReadyTimes() if learn else None
        self._w: World | None = None

    def world(self) -> World:
        w = super().world()
        self._w = replace(w, ready_times=self.times.seconds() if self.times is not None else dict(self.ready))
        return self._w

    def step(self) -> list[Intent]:
        out = super().step()
        if self.times is not None and self._w is not None:
            self.times.saw(self._w, out, self.replicas)
        return out


def asleep_on_n2_then_n1_joins(sim: Measured, load_for: float = 10.0, wake_for: float = 0.0) -> str:
    """od loads on n2 (the slow class) and sleeps there; then n1, of the fast class and holding the weights, joins.
    `wake_for`: seconds a wake takes before the replica is asleep again (0: none)."""
    sim.demand["od"] = sim.now
    sim.step()
    sim.advance(load_for)
    sim.heartbeat()
    sim.step()
    (r,) = sim.live("od")
    assert r.ready and r.node_ids() == ["n2"]
    sim.demand.clear()
    sim.advance(IDLE + 1)
    sim.heartbeat()
    sim.step()
    assert sim.replicas[r.id].sleep_level == 1
    sim.heartbeat(overrides={(r.id, 0): "sleeping"})
    if wake_for:
        sim.demand["od"] = sim.now
        sim.step()
        sim.advance(wake_for)
        sim.heartbeat()
        sim.step()
        assert sim.replicas[r.id].ready
        sim.demand.clear()
        sim.advance(IDLE + 1)
        sim.heartbeat()
        sim.step()
        assert sim.replicas[r.id].sleep_level == 1
        sim.heartbeat(overrides={(r.id, 0): "sleeping"})
    sim.nodes["n1"] = node("n1", cls=FAST, weights=(SOURCE,), seen=sim.now)
    return r.id


def test_a_sleeper_whose_wake_is_slow_loses_to_a_load_on_a_node_holding_the_weights() -> None:
    sim = Measured({("od", "sim", SLOW, "wake"): 40.0, ("od", "sim", FAST, "load_held"): 8.0})
    rid = asleep_on_n2_then_n1_joins(sim)
    sim.demand["od"] = sim.now
    out = sim.step()
    assert Wake(rid) not in out
    stop = sim.replicas[rid].stop
    assert stop is not None and stop.reason == Reason.FasterToLoad
    assert "n1" in stop.message and "8.0s" in stop.message and "40.0s" in stop.message
    (new,) = sim.live("od")
    assert new.id != rid and new.node_ids() == ["n1"]
    assert any("stopping: a load on n1" in e for e in sim.events)


def test_a_wake_measured_faster_than_the_load_wakes_the_sleeper() -> None:
    sim = Measured({("od", "sim", SLOW, "wake"): 2.0, ("od", "sim", FAST, "load_held"): 8.0})
    rid = asleep_on_n2_then_n1_joins(sim)
    sim.demand["od"] = sim.now
    assert Wake(rid) in sim.step()
    assert sim.live("od") == [sim.replicas[rid]]


def test_without_measurements_of_both_ways_the_sleeper_wakes_as_before() -> None:
    for ready in ({}, {("od", "sim", FAST, "load_held"): 1.0}, {("od", "sim", SLOW, "wake"): 99.0}):
        sim = Measured(ready)
        rid = asleep_on_n2_then_n1_joins(sim)
        sim.demand["od"] = sim.now
        assert Wake(rid) in sim.step(), ready
        assert sim.live("od") == [sim.replicas[rid]]


def test_a_load_measured_on_another_gpu_class_than_the_placement_s_decides_nothing() -> None:
    sim = Measured({("od", "sim", SLOW, "wake"): 40.0, ("od", "sim", "B200", "load_held"): 1.0})
    rid = asleep_on_n2_then_n1_joins(sim)
    sim.demand["od"] = sim.now
    assert Wake(rid) in sim.step()


def test_the_estimates_are_learnt_from_the_passes_and_decide_the_next_request() -> None:
    sim = Measured(learn=True)
    rid = asleep_on_n2_then_n1_joins(sim, load_for=10.0, wake_for=30.0)
    assert sim.times is not None
    got = {(e.gpu_class, e.way): (e.seconds, e.samples) for e in sim.times.lines()}
    assert got == {(SLOW, "load_held"): (10.0, 1), (SLOW, "wake"): (30.0, 1)}
    sim.demand["od"] = sim.now
    assert Wake(rid) in sim.step(), "no load measured on n1's class: it wakes"
