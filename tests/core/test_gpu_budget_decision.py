"""Budgets in GPU-seconds or money, the pure part (core/gpu_budget.py): the bound a request reserves, what it is
settled at, and the decision, in exact figures."""

from __future__ import annotations

import calendar

import pytest
from pydantic import ValidationError

from llmgw.core.gpu_budget import DEFAULT_TOKENS_PER_S, GpuUse, Size, bound, check, of_seconds, speed
from llmgw.core.limits import KeyLimits, LimitRefusal

NOON = float(calendar.timegm((2026, 12, 15, 12, 0, 0)))
EIGHT_H100 = Size(gpus=8, rate=3.6)  # 3.6 per GPU-hour: 0.001 per GPU-second


def test_the_speed_is_a_low_percentile_of_the_measured_and_a_slow_default_without_any() -> None:
    assert speed([]) == DEFAULT_TOKENS_PER_S == 10.0
    assert speed([float(v) for v in range(100, 0, -1)]) == 11.0  # the 10th of 100 from the slowest up
    assert speed([50.0]) == 50.0
    assert speed([0.0, 0.0]) == 0.01  # never a bound of years


def test_a_request_reserves_its_tokens_time_on_all_of_a_replicas_gpus() -> None:
    ask = bound(1_000, EIGHT_H100, 50.0)  # 20 s on 8 GPUs
    assert ask.gpu_s == pytest.approx(160.0)
    assert ask.cost == pytest.approx(0.16)
    assert bound(1_000, Size(gpus=0, rate=0.0), 100.0) == GpuUse(10.0, 0.0)  # a CPU engine counts as one device


def test_a_request_reserving_no_tokens_reserves_nothing() -> None:
    assert bound(0, EIGHT_H100, 50.0) == GpuUse(0.0, 0.0)
    assert bound(-5, EIGHT_H100, 50.0) == GpuUse(0.0, 0.0)


def test_a_request_is_settled_at_its_gpus_times_how_long_it_ran() -> None:
    assert of_seconds(EIGHT_H100, 2.5) == GpuUse(20.0, 0.02)
    assert of_seconds(EIGHT_H100, -1.0) == GpuUse(0.0, 0.0)


def test_a_key_within_its_gpu_budget_is_admitted_and_one_past_it_refused_with_the_figures() -> None:
    lim = KeyLimits(gpu_budget=1_000.0, budget_period="day")
    assert check(lim, GpuUse(700.0), GpuUse(140.0), GpuUse(160.0), NOON, "USD").admitted  # exactly 1000
    d = check(lim, GpuUse(700.0), GpuUse(140.0), GpuUse(160.5), NOON, "USD")
    assert d.admitted is False and d.refusal == LimitRefusal.Quota and d.retry_after is None
    assert d.message == ("GPU budget spent: 840.00 of 1000 GPU-seconds this day are charged or held by requests in "
                         "flight, 160.00 left, and this request may cost up to 160.50; it renews in 12h0m0s")


def test_a_cost_budget_is_counted_in_the_currency() -> None:
    lim = KeyLimits(cost_budget=2.0, budget_period="total")
    assert check(lim, GpuUse(1e9, 1.5), GpuUse(), GpuUse(1e9, 0.5), NOON, "EUR").admitted  # GPU-seconds unlimited
    d = check(lim, GpuUse(0.0, 2.5), GpuUse(), GpuUse(0.0, 0.01), NOON, "EUR")
    assert d.refusal == LimitRefusal.Quota
    assert d.message == ("cost budget spent: 2.50 of 2 EUR this total are charged or held by requests in flight, "
                         "0.00 left, and this request may cost up to 0.01")


def test_no_gpu_budget_admits_anything() -> None:
    assert check(KeyLimits(budget=5), GpuUse(1e12, 1e12), GpuUse(1e12, 1e12), GpuUse(1.0, 1.0), NOON, "USD").admitted


@pytest.mark.parametrize("bad", [{"gpu_budget": True}, {"gpu_budget": 0}, {"cost_budget": "5"},
                                 {"cost_budget": 1e14}, {"gpu_budget": float("nan")}, {"cost_budget": -1}])
def test_the_key_api_refuses_a_gpu_budget_out_of_bounds(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        KeyLimits.model_validate(bad)


def test_a_gpu_budget_is_a_limit() -> None:
    assert KeyLimits(gpu_budget=1.0).any() and KeyLimits(cost_budget=1).any()
    assert KeyLimits(gpu_budget=1.0).gpu_limited() and not KeyLimits(budget=1).gpu_limited()


def test_a_refusal_names_money_below_a_cent_in_figures_that_are_not_zero() -> None:
    # a request of one GPU for a few seconds costs a fraction of a cent: "may cost up to 0.00" with "0.00 left" would
    # refuse what the message says is free
    lim = KeyLimits(cost_budget=0.05, budget_period="day")
    d = check(lim, GpuUse(10.0, 0.048), GpuUse(), GpuUse(4.0, 0.004), NOON, "USD")
    assert d.refusal == LimitRefusal.Quota
    assert d.message == ("cost budget spent: 0.048 of 0.05 USD this day are charged or held by requests in flight, "
                         "0.002 left, and this request may cost up to 0.004; it renews in 12h0m0s")
