"""The control plane's measurements of each way to ready: a weighted mean per model, engine, GPU class and way,
bounded in keys, shown on /api/status's summary and /metrics as llmgw_ready_seconds."""

from __future__ import annotations

from pathlib import Path

from llmgw.control.nodes import ready_times
from llmgw.control.nodes.ready_times import ReadyTimes
from llmgw.control.views.status import StatusJson, summary_of
from llmgw.core.conditions import ConditionType, Status, set_condition
from llmgw.core.explanation import Explanation
from llmgw.core.reasons import Reason
from llmgw.reconcile.intents import Fail, Place
from llmgw.reconcile.sleep_intents import Wake
from llmgw.reconcile.world import World
from llmgw.records.state import ReplicaRecord, ShardAssignment
from tests.clusters import model, node
from tests.control.views.test_metrics_families import known, samples, v
from tests.harness import plane_in

A = ShardAssignment(rank=0, node_id="n1", address="10.0.0.1", gpus=[0, 1, 2, 3])


def world(now: float, replicas: list[ReplicaRecord]) -> World:
    return World(now=now, started_at=0.0, models={"m": model("m", source="/models/m")},
                 nodes=[node("n1", cls="H100-80G", weights=("/models/m",))], replicas=replicas)


def rec(ready: bool = False, sleep: int = 0, failed: bool = False) -> ReplicaRecord:
    conds = set_condition([], ConditionType.Ready, Status.TRUE if ready else Status.FALSE, Reason.AllShardsReady, "", 0)
    if failed:
        conds = set_condition(conds, ConditionType.Failed, Status.TRUE, Reason.ShardFailed, "", 0)
    return ReplicaRecord(id="r", model="m", created_at=0, shards_expected=1, assignments=[A], conditions=conds,
                         sleep_level=sleep)  # type: ignore[arg-type]


def placed_then_ready(t: ReadyTimes, at: float, took: float) -> None:
    t.saw(world(at, []), [Place("r", (A,), Explanation(model="m", at=at, placed=True), 1)], {"r": rec()})
    t.saw(world(at + took, [rec()]), [], {"r": rec(ready=True)})


def test_a_load_is_measured_from_placement_to_ready_as_a_weighted_mean() -> None:
    t = ReadyTimes()
    placed_then_ready(t, 100.0, 10.0)
    placed_then_ready(t, 200.0, 20.0)
    (line,) = t.lines()
    assert (line.model, line.engine, line.gpu_class, line.way, line.samples) == ("m", "sim", "H100-80G", "load_held", 2)
    assert abs(line.seconds - (0.7 * 10 + 0.3 * 20)) < 1e-9
    assert t.seconds() == {("m", "sim", "H100-80G", "load_held"): line.seconds}


def test_a_wake_is_measured_and_a_failure_teaches_nothing() -> None:
    t = ReadyTimes()
    t.saw(world(50.0, [rec(sleep=1)]), [Wake("r")], {"r": rec()})
    t.saw(world(52.5, [rec()]), [], {"r": rec(ready=True)})
    assert t.seconds() == {("m", "sim", "H100-80G", "wake"): 2.5}
    t.saw(world(60.0, [rec(sleep=2)]), [Wake("r")], {"r": rec()})
    t.saw(world(99.0, [rec()]), [Fail("r", Reason.ShardFailed, "")], {"r": rec(failed=True)})
    t.saw(world(100.0, [rec()]), [], {"r": rec(ready=True)})
    assert ("m", "sim", "H100-80G", "wake2") not in t.seconds()


def test_the_estimates_are_bounded_in_keys() -> None:
    t = ReadyTimes()
    for i in range(ready_times.MAX_KEYS + 5):
        t._learn((f"m{i}", "sim", "x", "wake"), 1.0, float(i))
    assert len(t.lines()) == ready_times.MAX_KEYS
    assert ("m0", "sim", "x", "wake") not in t.seconds(), "the least recently measured went first"


def test_the_estimates_are_on_metrics_per_model_engine_class_and_way() -> None:
    t = ReadyTimes()
    placed_then_ready(t, 100.0, 12.0)
    s = known()
    s.ready_times = t.lines()
    out = samples(s)
    assert v(out, "llmgw_ready_seconds", model="m", engine="sim", gpu_class="H100-80G", way="load_held") == 12.0


async def test_the_plane_s_estimates_are_on_its_status(tmp_path: Path) -> None:
    p = plane_in(tmp_path)
    placed_then_ready(p.ready_times, 100.0, 7.0)
    data = StatusJson().data(await summary_of(p.status()))
    assert data["ready_times"] == [{"model": "m", "engine": "sim", "gpu_class": "H100-80G", "way": "load_held",
                                    "seconds": 7.0, "samples": 1, "at": 107.0}]
