"""Each rule of scaling on load, on a fake clock: up after its period above the target, one step at a time, up to
max; down after its period below half, never below the floor; nothing between half and the target."""

from __future__ import annotations

from typing import TypedDict

from llmgw.reconcile.scaling import Step, Timer, decide


class Rules(TypedDict):
    target: float
    up_after: float
    down_after: float
    lo: int
    hi: int


RULES: Rules = {"target": 4.0, "up_after": 30.0, "down_after": 120.0, "lo": 1, "hi": 3}


def test_above_the_target_for_its_period_adds_one_replica_and_starts_the_period_again() -> None:
    t = Timer()
    d = decide(**RULES, ready=1, in_flight=6, timer=t, now=0.0)
    assert d.step is Step.Hold and d.timer.above_since == 0.0 and d.per_replica == 6
    d = decide(**RULES, ready=1, in_flight=6, timer=d.timer, now=29.0)
    assert d.step is Step.Hold
    d = decide(**RULES, ready=1, in_flight=6, timer=d.timer, now=30.0)
    assert d.step is Step.Up and "6.0 requests in flight per replica, above 4 for 30s" in d.message
    d = decide(**RULES, ready=1, in_flight=6, timer=d.timer, now=31.0)  # the new one is not ready yet: wait again
    assert d.step is Step.Hold
    assert decide(**RULES, ready=1, in_flight=6, timer=d.timer, now=60.0).step is Step.Up


def test_never_above_max() -> None:
    d = decide(**RULES, ready=3, in_flight=30, timer=Timer(above_since=0.0), now=1000.0)
    assert d.step is Step.Hold


def test_below_half_for_its_period_removes_one_but_never_below_the_floor() -> None:
    d = decide(**RULES, ready=3, in_flight=3, timer=Timer(), now=0.0)  # 1 per replica < 2
    assert d.step is Step.Hold and d.timer.below_since == 0.0
    d = decide(**RULES, ready=3, in_flight=3, timer=d.timer, now=120.0)
    assert d.step is Step.Down and "below 2 for 120s" in d.message
    assert decide(**RULES, ready=1, in_flight=0, timer=Timer(below_since=0.0), now=999.0).step is Step.Hold


def test_between_half_and_the_target_nothing_moves_and_the_timers_rest() -> None:
    d = decide(**RULES, ready=2, in_flight=6, timer=Timer(above_since=0.0, below_since=0.0), now=500.0)  # 3 each
    assert d.step is Step.Hold and d.timer == Timer()


def test_a_dip_restarts_the_period() -> None:
    d = decide(**RULES, ready=1, in_flight=6, timer=Timer(), now=0.0)
    d = decide(**RULES, ready=1, in_flight=3, timer=d.timer, now=20.0)  # back under the target
    d = decide(**RULES, ready=1, in_flight=6, timer=d.timer, now=25.0)
    assert decide(**RULES, ready=1, in_flight=6, timer=d.timer, now=50.0).step is Step.Hold  # 25 s, not 50
    assert decide(**RULES, ready=1, in_flight=6, timer=d.timer, now=55.0).step is Step.Up


def test_no_ready_replica_or_no_target_decides_nothing() -> None:
    assert decide(**RULES, ready=0, in_flight=9, timer=Timer(above_since=0.0), now=99.0).step is Step.Hold
    assert decide(**Rules({**RULES, "target": 0.0}), ready=2, in_flight=99, timer=Timer(), now=0.0).step is Step.Hold


def test_the_reconciler_adds_on_load_one_step_at_a_time_and_removes_when_it_falls() -> None:
    from llmgw.config.server import Scaling
    from llmgw.core.reasons import Reason
    from llmgw.reconcile.intents import Add
    from llmgw.reconcile.scaling import Step
    from tests.clusters import model, node
    from tests.reconcile.harness import Sim

    spec = model("m", gpus_per_shard=4, min_=1, max_=3)
    spec = spec.model_copy(update={"scaling": Scaling(min=1, max=3, target_in_flight=2, scale_up_after=30,
                                                      scale_down_after=120)})
    sim = Sim([spec], [node("n1"), node("n2")])
    sim.run(20)
    (first,) = sim.live("m")
    assert sim.replicas[first.id].ready
    sim.outstanding[first.id] = 5  # 5 in flight on one replica: above 2
    sim.run(25)
    assert len(sim.live("m")) == 1  # not yet 30 s
    sim.run(10)
    live = sim.live("m")
    assert len(live) == 2
    added = [i for i in sim.intents if isinstance(i, Add) and i.step is Step.Up]
    assert len(added) == 1 and "above 2 for" in added[0].words
    assert any(e.startswith(f"replica {added[0].replica_id} of m added: ") for e in sim.events)
    sim.run(20)  # the new one became ready; 5 over 2 replicas is still above 2, but its period starts again
    assert len(sim.live("m")) == 2
    sim.outstanding[first.id] = 0  # quiet: below 1 per replica
    sim.run(125)
    stopped = [r for r in sim.of("m") if r.stop is not None]
    assert len(stopped) == 1 and stopped[0].stop is not None and stopped[0].stop.reason == Reason.ScaledDown
    assert "below 1 for" in stopped[0].stop.message
    sim.run(600)
    assert len(sim.live("m")) == 1  # never below min


def test_the_summary_wants_what_the_reconciler_scaled_to_on_load() -> None:
    """ctl status, the dashboard and the metrics read the summary's wanted: it is the reconciler's own rule, so a
    model scaled on load to 3 shows wanted 3 (a copy of the rule without scaling on load said 1)."""
    from llmgw.config.server import Scaling
    from llmgw.control.views.summary import Demand, summarize
    from tests.clusters import model, node
    from tests.reconcile.harness import Sim

    spec = model("m", gpus_per_shard=8, min_=1, max_=3)
    spec = spec.model_copy(update={"scaling": Scaling(min=1, max=3, target_in_flight=2, scale_up_after=10,
                                                      scale_down_after=600)})
    sim = Sim([spec], [node("n1"), node("n2"), node("n3")])
    sim.run(10)
    for _ in range(40):  # a step at a time: each new replica ready, its load above the target again
        live = sim.live("m")
        if len(live) == 3 and all(r.ready for r in live):
            break
        for r in live:
            sim.outstanding[r.id] = 9
        sim.run(5)
    live = sim.live("m")
    assert len(live) == 3 and all(r.ready for r in live)

    def wanted() -> int:
        (line,) = summarize(list(sim.nodes.values()), list(sim.replicas.values()), [], {}, sim.now,
                            models=sim.models, demand=Demand(in_flight=dict(sim.outstanding))).models
        assert line.ready == 3
        return line.wanted

    assert wanted() == 3
    sim.outstanding.clear()  # quiet, but not yet for scale_down_after: the reconciler keeps all three
    sim.run(60)
    assert len(sim.live("m")) == 3 and wanted() == 3
