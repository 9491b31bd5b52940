"""What keys spent, kept across changes of their limits and across midnight, and tickets a worker released: an
in-process control plane over SQLite in tmp_path with a FakeClock, admitting through its own LimitCounters."""

from __future__ import annotations

import calendar
from pathlib import Path

from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.core.limits import KeyLimits, LimitRefusal
from llmgw.store.base import ApiKeyRecord, UsageRecord
from tests.harness import plane_in

NOON = float(calendar.timegm((2026, 12, 15, 12, 0, 0)))
BEFORE_MIDNIGHT = float(calendar.timegm((2026, 12, 15, 23, 59, 50)))


def plane(tmp_path: Path, clock: FakeClock) -> ControlPlane:
    return plane_in(tmp_path, clock)


def spend(p: ControlPlane, key: ApiKeyRecord, cost: int, used: int) -> None:
    d, ticket = p.limit_counters.admit(key, cost)
    assert d.admitted, d.message
    assert p.limit_counters.settle(ticket, used)


async def test_a_budget_moved_to_another_period_counts_what_was_spent_before(tmp_path: Path) -> None:
    clock = FakeClock(NOON)
    p = plane(tmp_path, clock)
    _, key = await p.credentials.create_key("t", [], KeyLimits(budget=1_000, budget_period="month"))
    spend(p, key, 600, 600)
    updated = await p.credentials.update_key(key.id, {"limits": KeyLimits(budget=1_000, budget_period="day")})
    assert isinstance(updated, ApiKeyRecord)
    key = updated
    d, _ = p.limit_counters.admit(key, 500)
    assert d.refusal == LimitRefusal.Quota, "600 tokens spent today under a month budget were forgotten at the change"
    assert p.limit_counters.use_of(key)["budget_used"] == 600


async def test_a_budget_added_counts_what_the_key_spent_without_one(tmp_path: Path) -> None:
    clock = FakeClock(NOON)
    p = plane(tmp_path, clock)
    _, key = await p.credentials.create_key("t", [])
    p.store.add_usage_new([UsageRecord(key_id=key.id, model="m", replica_id="r", prompt_tokens=300,
                                       completion_tokens=500, started_at=clock.now(), duration_s=1.0, status=200)])
    updated = await p.credentials.update_key(key.id, {"limits": KeyLimits(budget=1_000, budget_period="day")})
    assert isinstance(updated, ApiKeyRecord)
    key = updated
    d, _ = p.limit_counters.admit(key, 500)
    assert d.refusal == LimitRefusal.Quota, "800 tokens spent today, before the budget was set, were not counted"


async def test_a_request_that_ends_after_midnight_is_charged_to_the_day_that_admitted_it(tmp_path: Path) -> None:
    clock = FakeClock(BEFORE_MIDNIGHT)
    p = plane(tmp_path, clock)
    _, key = await p.credentials.create_key("t", [], KeyLimits(budget=1_000, budget_period="day"))
    _, late = p.limit_counters.admit(key, 900)  # admitted yesterday
    clock.advance(20)  # midnight passed
    _, early = p.limit_counters.admit(key, 100)  # admitted today
    assert p.limit_counters.settle(late, 900)
    d, _ = p.limit_counters.admit(key, 900)  # today: 100 held, nothing spent
    assert d.admitted, f"yesterday's request was charged to today: {d.message}"
    assert p.limit_counters.settle(early, 100)
    assert p.limit_counters.spent_in(key.id, "day") == 100 and p.limit_counters.spent_in(key.id, "total") == 1_000


async def test_a_ticket_released_before_its_admission_arrives_is_never_held(tmp_path: Path) -> None:
    """A worker whose admission answer was lost releases the ticket it chose (settled at 0); the admission, arriving
    late, must not hold a slot that nobody will ever settle."""
    p = plane(tmp_path, FakeClock(NOON))
    _, key = await p.credentials.create_key("t", [], KeyLimits(concurrency=1))
    assert not p.limit_counters.settle("w1-lost", 0)
    late = p.limit_counters.admission(key, 10, "w1-lost")
    assert not late.admitted and late.refusal == "rate_limit_exceeded"
    d, _ = p.limit_counters.admit(key, 10)
    assert d.admitted, "the lost admission holds the key's only slot"
