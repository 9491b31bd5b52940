"""Each window's GPU time charged to exactly one party: busy time shared by the tokens its requests processed, load
to the key that triggered it (pending until it lands), idle split by the residency's keys, asleep time free."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from llmgw.chargeback import WindowCharges, charge_window
from llmgw.config.chargeback import ChargebackConfig
from llmgw.records.chargeback import OPERATOR, ReplicaSpan
from llmgw.store.base import UsageRecord

CONFIG = ChargebackConfig(rates={"H100": 3.6})  # 0.001 per GPU-second


def span(gpus: int = 1, created: float = 0.0, ready: float | None = 0.0, demand: bool = True,
         ended: float | None = None, asleep: Sequence[tuple[float, float | None]] = (), id: str = "r1") -> ReplicaSpan:
    return ReplicaSpan(id=id, model="m", gpus=gpus, gpu_class="H100", demand=demand, created_at=created,
                       ready_at=ready, ended_at=ended, asleep=list(asleep))


def req(key: str, start: float, dur: float, replica: str = "r1", id: str = "", prompt: int = 1,
        completion: int = 1) -> UsageRecord:
    return UsageRecord(id=id or f"{key}-{start:08.3f}-{replica}", key_id=key, model="m", replica_id=replica,
                       prompt_tokens=prompt, completion_tokens=completion, started_at=start, duration_s=dur,
                       status=200)


def by_key(acc: WindowCharges) -> dict[str, tuple[float, float, float]]:
    return {r.key_id: (r.busy_s, r.load_s, r.idle_s) for r in acc.rows}


def test_a_busy_stretch_goes_to_its_requests_by_the_tokens_they_processed() -> None:
    a = req("A", 0, 10, id="a" * 8, prompt=0, completion=30)
    b = req("B", 5, 5, id="b" * 8, prompt=0, completion=10)
    acc = charge_window(0, 10, [span(gpus=2)], [a, b], CONFIG)
    assert by_key(acc) == {"A": (15.0, 0.0, 0.0), "B": (5.0, 0.0, 0.0)}
    assert acc.shares == {"a" * 8: 15.0, "b" * 8: 5.0}
    assert [r.cost for r in acc.rows] == [pytest.approx(0.015), pytest.approx(0.005)]
    assert all(r.hour == 0 for r in acc.rows)


def test_a_long_requests_lone_tail_is_shared_by_the_work_of_its_stretch() -> None:
    """Sent together, 40 tokens and 10: the long one runs its last 1.5 s alone, and is charged 4/5 of the stretch,
    not the whole replica for those seconds (which made shares follow time in flight, not work)."""
    acc = charge_window(0, 10, [span()], [req("A", 0, 2, completion=40, prompt=0), req("B", 0, 0.5, completion=10,
                                                                                prompt=0)], CONFIG)
    busy = {k: v[0] for k, v in by_key(acc).items()}
    assert busy["A"] == pytest.approx(1.6) and busy["B"] == pytest.approx(0.4)


def test_stretches_apart_are_not_pooled() -> None:
    acc = charge_window(0, 10, [span()], [req("A", 0, 1, completion=10, prompt=0), req("B", 5, 1, completion=90,
                                                                                prompt=0)], CONFIG)
    assert {k: v[0] for k, v in by_key(acc).items()} == {"A": 1.0, "B": 1.0}


def test_a_request_across_the_window_counts_the_part_of_its_work_inside() -> None:
    acc = charge_window(0, 10, [span()], [req("A", 5, 10, completion=10, prompt=0), req("B", 5, 5, completion=5,
                                                                                 prompt=0)], CONFIG)
    busy = {k: v[0] for k, v in by_key(acc).items()}
    assert busy["A"] == pytest.approx(2.5) and busy["B"] == pytest.approx(2.5)


def test_prompt_tokens_weigh_as_configured() -> None:
    cheap = ChargebackConfig(rates={"H100": 3.6}, prompt_weight=0.1)
    reqs = [req("A", 0, 1, prompt=100, completion=0), req("B", 0, 1, prompt=0, completion=30)]
    busy = {k: v[0] for k, v in by_key(charge_window(0, 10, [span()], reqs, cheap)).items()}
    assert busy["A"] == pytest.approx(0.25) and busy["B"] == pytest.approx(0.75)


def test_a_stretch_without_tokens_is_split_by_time_in_flight() -> None:
    reqs = [req("A", 0, 4, prompt=0, completion=0), req("B", 0, 1, prompt=0, completion=0)]
    busy = {k: v[0] for k, v in by_key(charge_window(0, 10, [span()], reqs, CONFIG)).items()}
    assert busy["A"] == pytest.approx(3.2) and busy["B"] == pytest.approx(0.8)


def test_load_waits_for_its_trigger_then_is_charged_to_it() -> None:
    first = charge_window(0, 10, [span(ready=4)], [], CONFIG)
    assert first.rows == []
    (s,) = first.spans
    assert (s.pending_s, s.pending_idle_s, s.trigger, s.accounted_to) == (4.0, 6.0, "", 10.0)
    second = charge_window(10, 20, first.spans, [req("A", 12, 2)], CONFIG)
    assert by_key(second) == {"A": (2.0, 4.0, 14.0)}
    (s,) = second.spans
    assert (s.pending_s, s.pending_idle_s, s.trigger) == (0.0, 0.0, "A")


def test_a_load_no_request_used_is_the_operators_at_the_end() -> None:
    acc = charge_window(0, 10, [span(gpus=2, ready=3, ended=8)], [], CONFIG)
    assert by_key(acc) == {OPERATOR: (0.0, 6.0, 10.0)}


def test_idle_time_split_by_the_keys_the_residency_served() -> None:
    acc = charge_window(0, 10, [span(gpus=4)], [req("A", 0, 3), req("B", 3, 1)], CONFIG)
    assert by_key(acc) == {"A": (12.0, 0.0, 18.0), "B": (4.0, 0.0, 6.0)}


def test_a_min_one_models_load_and_idle_are_the_operators() -> None:
    acc = charge_window(0, 10, [span(gpus=2, ready=5, demand=False)], [req("A", 6, 2)], CONFIG)
    assert by_key(acc) == {"A": (4.0, 0.0, 0.0), OPERATOR: (0.0, 10.0, 6.0)}


def test_asleep_time_is_not_charged_and_a_wake_is_the_waking_requests() -> None:
    s = span(asleep=[(2.0, 6.0)])
    acc = charge_window(0, 10, [s], [req("A", 0, 1), req("B", 7, 1)], CONFIG)
    assert by_key(acc) == {"A": (1.0, 0.0, 1.0), "B": (1.0, 1.0, 2.0)}
    (out,) = acc.spans
    assert (out.trigger, out.keys, out.residency_from) == ("B", {"B": 1.0}, 6.0)


def test_a_sleeper_still_asleep_costs_nothing() -> None:
    acc = charge_window(0, 10, [span(asleep=[(0.0, None)])], [], CONFIG)
    assert acc.rows == [] and acc.spans[0].pending_s == 0.0


def test_a_wake_no_request_used_is_the_operators_when_the_replica_ends() -> None:
    acc = charge_window(0, 10, [span(asleep=[(2.0, 6.0)], ended=9.0)], [req("A", 0, 1)], CONFIG)
    assert by_key(acc) == {"A": (1.0, 0.0, 1.0), OPERATOR: (0.0, 3.0, 0.0)}


def test_load_time_in_flight_is_load_not_busy() -> None:
    acc = charge_window(0, 10, [span(ready=4)], [req("A", 1, 5)], CONFIG)
    assert by_key(acc) == {"A": (2.0, 4.0, 4.0)}


def test_a_window_before_the_span_or_after_its_end_charges_nothing() -> None:
    acc = charge_window(0, 10, [span(created=12.0), span(id="r2", created=0.0, ended=0.0)], [], CONFIG)
    assert acc.rows == []


def test_time_already_accounted_is_not_charged_twice() -> None:
    done = charge_window(0, 10, [span(demand=False)], [], CONFIG)
    again = charge_window(0, 10, done.spans, [], CONFIG)
    assert again.rows == []


def test_a_window_is_charged_to_the_hour_that_holds_its_start() -> None:
    acc = charge_window(7200, 7260, [span(demand=False, created=7000)], [], CONFIG)
    assert [(r.hour, r.idle_s) for r in acc.rows] == [(2, 60.0)]


def test_an_unpriced_class_is_counted_at_no_cost() -> None:
    acc = charge_window(0, 10, [span(demand=False).model_copy(update={"gpu_class": "L4"})], [], CONFIG)
    assert [(r.gpu_s, r.cost) for r in acc.rows] == [(10.0, 0.0)]


def test_a_cpu_replica_counts_as_one_device() -> None:
    acc = charge_window(0, 10, [span(gpus=0, demand=False)], [], CONFIG)
    assert sum(r.gpu_s for r in acc.rows) == 10.0


def test_the_request_that_asked_for_a_load_triggers_it_though_it_came_first() -> None:
    acc = charge_window(0, 10, [span(created=2.0, ready=5.0)], [req("A", 1.0, 6.0), req("B", 3.0, 1.0)], CONFIG)
    assert by_key(acc) == {"A": (2.0, 3.0, 3.0)}


def test_the_request_that_woke_a_sleeper_triggers_the_wake_though_it_came_first() -> None:
    s = span(asleep=[(2.0, 6.0)])
    acc = charge_window(0, 10, [s], [req("A", 0, 1), req("B", 5.0, 2.0), req("C", 8.0, 1.0)], CONFIG)
    # idle instant by instant: [7, 8) B's alone (C had not come yet), [9, 10) shared by B and C
    assert by_key(acc) == {"A": (1.0, 0.0, 1.0), "B": (1.0, 0.0, 1.5), "C": (1.0, 0.0, 0.5)}
    assert acc.spans[0].trigger == "B"


def test_sleeps_before_the_current_residency_are_not_carried() -> None:
    s = span(asleep=[(1.0, 2.0), (3.0, 4.0), (5.0, 6.0), (8.0, None)])
    (out,) = charge_window(0, 10, [s], [req("A", 7.0, 0.5)], CONFIG).spans
    assert out.asleep == [(5.0, 6.0), (8.0, None)]
    later = charge_window(10, 20, [out.model_copy(update={"asleep": [(5.0, 6.0), (8.0, 12.0)]})], [], CONFIG)
    assert later.spans[0].asleep == [(8.0, 12.0)]
