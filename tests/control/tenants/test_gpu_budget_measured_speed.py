"""The speed a model's next reservations are bounded by (GpuBudgets.measured, then ask): taken only from requests
that ended well with tokens and time, from the last SPEEDS_KEPT of each model, for at most MAX_MODELS models. Every
model here holds one unpriced GPU, so a reservation's GPU-seconds are its tokens over the speed taken."""

from __future__ import annotations

import calendar

import pytest

from llmgw.control.tenants import gpu_budgets
from llmgw.control.tenants.gpu_budgets import GpuBudgets
from llmgw.core.clock import FakeClock
from llmgw.core.gpu_budget import Size
from llmgw.store.base import UsageRecord

NOON = float(calendar.timegm((2026, 12, 15, 12, 0, 0)))


def budgets() -> GpuBudgets:
    return GpuBudgets(FakeClock(NOON), "USD", lambda model: Size(1, 0.0))


def rec(tokens: int, seconds: float, status: int = 200, model: str = "m") -> UsageRecord:
    return UsageRecord(key_id="k", model=model, replica_id="r", prompt_tokens=0, completion_tokens=tokens,
                       started_at=NOON, duration_s=seconds, status=status)


def test_only_requests_that_ended_well_with_tokens_and_time_give_a_speed() -> None:
    b = budgets()
    b.measured([
        rec(1, 10.0, status=500),  # failed: 0.1 tokens a second, not the model's speed
        rec(0, 1.0),  # no tokens
        rec(100, 0.0),  # no time
        rec(1, 0.05),  # 20 tokens a second
        rec(50, 1.0),
    ])
    assert b.ask("m", 100).gpu_s == pytest.approx(5.0)  # the slower of the two: 100 tokens at 20 a second
    assert b.ask("unmeasured", 100).gpu_s == pytest.approx(10.0)  # DEFAULT_TOKENS_PER_S


def test_past_the_model_limit_new_models_are_not_measured_and_known_ones_still_are(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_budgets, "MAX_MODELS", 1)
    b = budgets()
    b.measured([rec(40, 1.0, model="a"), rec(40, 1.0, model="b"), rec(20, 1.0, model="a")])
    assert b.ask("a", 100).gpu_s == pytest.approx(5.0)
    assert b.ask("b", 100).gpu_s == pytest.approx(10.0)  # not measured: the default


def test_the_speed_follows_the_last_requests_only() -> None:
    b = budgets()
    b.measured([rec(1, 1.0)] * gpu_budgets.SPEEDS_KEPT)
    assert b.ask("m", 100).gpu_s == pytest.approx(100.0)
    b.measured([rec(100, 1.0)] * gpu_budgets.SPEEDS_KEPT)  # the model got faster: the slow ones are gone
    assert b.ask("m", 100).gpu_s == pytest.approx(1.0)


def test_one_keys_prompt_heavy_requests_cannot_shrink_anothers_reservations() -> None:
    """Replayed from outside: a key sent prompt-heavy requests (4,000 prompt tokens, 1 generated, in half a
    second), which counted at 8,002 tokens a second and sized every key's next reservations by it. The speed is
    what requests generate: the flood can only make reservations larger, never smaller."""
    b = budgets()
    honest = [UsageRecord(key_id="honest", model="m", replica_id="r", prompt_tokens=50, completion_tokens=100,
                          started_at=NOON, duration_s=10.0, status=200)] * 10
    b.measured(honest)
    before = b.ask("m", 1000).gpu_s
    assert before == pytest.approx(100.0)  # 1,000 tokens at the 10 a second it generates
    flood = [UsageRecord(key_id="flood", model="m", replica_id="r", prompt_tokens=4000, completion_tokens=1,
                         started_at=NOON, duration_s=0.5, status=200)] * 70
    b.measured(flood)
    assert b.ask("m", 1000).gpu_s >= before, "another key's requests made this one's reservation smaller"
