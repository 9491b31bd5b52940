"""What a key's settled requests count against its GPU budgets until chargeback's charges for their time land
(control/tenants/gpu_budgets.py on its own, no control plane): summed per bucket of their end, counted in the
period holding that end, dropped when the mark passes them, replaced by the charges read, each charged hour once.
Every request here holds 2 GPUs priced 3.6 an hour: a second of it is 2 GPU-seconds and costs 0.002."""

from __future__ import annotations

import calendar

import pytest

from llmgw.control.tenants import gpu_budgets
from llmgw.control.tenants.gpu_budgets import GpuBudgets, Settled
from llmgw.core.clock import FakeClock
from llmgw.core.gpu_budget import GpuUse, Size
from llmgw.records.chargeback import ChargeRow
from llmgw.store.base import UsageRecord

NOON = float(calendar.timegm((2026, 12, 15, 12, 0, 0)))
DAY = NOON - 12 * 3600  # today's start (UTC)
H = int(DAY // 3600)  # today's first hour


def budgets() -> GpuBudgets:
    return GpuBudgets(FakeClock(NOON), "USD", lambda model: Size(2, 3.6))


def figures(use: GpuUse) -> tuple[float, float]:
    return use.gpu_s, use.cost


def test_settled_requests_count_in_the_period_holding_their_end_and_every_one_counts() -> None:
    b = budgets()
    b.settled("k", "m", 10.0, DAY - 5)  # yesterday
    b.settled("k", "m", 5.0, DAY + 5)
    b.settled("k", "m", 1.0, DAY + 7)  # the same bucket as the one before
    assert figures(b.spent("k", "day", NOON)) == pytest.approx((12.0, 0.012))
    assert figures(b.spent("k", "total", NOON)) == pytest.approx((32.0, 0.032))
    assert figures(b.spent("other", "day", NOON)) == (0.0, 0.0)


def test_a_request_settled_after_the_wall_clock_stepped_back_does_not_count_in_the_later_period() -> None:
    b = budgets()
    b.settled("k", "m", 5.0, DAY + 100)
    b.settled("k", "m", 50.0, DAY - 100)  # the clock stepped back across midnight
    assert figures(b.spent("k", "day", NOON)) == pytest.approx((10.0, 0.01))
    assert figures(b.spent("k", "total", NOON)) == pytest.approx((110.0, 0.11))


def test_past_the_bucket_limit_the_oldest_bucket_is_merged_into_the_next_and_nothing_is_lost(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_budgets, "MAX_BUCKETS", 3)
    s = Settled()
    for b, use in ((1, GpuUse(1.0, 0.1)), (2, GpuUse(2.0, 0.2)), (3, GpuUse(4.0, 0.4))):
        s.add(b, use)
    assert figures(s.since(2)) == pytest.approx((6.0, 0.6))  # three kept apart
    s.add(4, GpuUse(8.0, 0.8))
    assert list(s.buckets) == [2, 3, 4]
    assert figures(s.since(2)) == pytest.approx((15.0, 1.5))  # bucket 1 is in bucket 2 now
    assert figures(s.since(3)) == pytest.approx((12.0, 1.2))
    assert figures(s.since(0)) == pytest.approx((15.0, 1.5))
    assert s.drop_before(3)  # the merged bucket dropped whole: what it took in goes with it
    assert figures(s.since(0)) == pytest.approx((12.0, 1.2))


def test_when_the_mark_moves_settled_time_before_its_bucket_is_dropped_and_the_rest_kept() -> None:
    b = budgets()
    b.settled("k", "m", 0.25, DAY + 5)
    b.settled("k", "m", 0.25, DAY + 3605)
    b.settled("k", "m", 0.25, DAY + 3612)
    b.landed(DAY + 3608, [])  # in the bucket of the second: a request there may have ended after the mark
    assert figures(b.spent("k", "day", NOON)) == pytest.approx((1.0, 0.001))
    b.landed(DAY + 3611, [])
    assert figures(b.spent("k", "day", NOON)) == pytest.approx((0.5, 0.0005))
    b.landed(DAY + 3700, [])
    assert figures(b.spent("k", "day", NOON)) == (0.0, 0.0)
    assert b.shared() == {}


def test_requests_replayed_at_start_count_when_they_reached_a_replica_and_ended_after_the_mark() -> None:
    b = budgets()
    mark = NOON - 600
    b.landed(mark, [])

    def rec(id: str, started: float, dur: float, replica: str = "m-1") -> UsageRecord:
        return UsageRecord(id=id, key_id="k", model="m", replica_id=replica, prompt_tokens=1, completion_tokens=1,
                           started_at=started, duration_s=dur, status=200)

    b.replayed([
        rec("across-the-mark", mark - 2, 5.0),
        rec("reached-no-replica", mark + 10, 5.0, replica=""),
        rec("short-request", mark + 20, 0.5),
        rec("before-the-mark", mark - 100, 5.0),
    ])
    assert figures(b.spent("k", "day", NOON)) == pytest.approx((11.0, 0.011))


def test_landed_charges_count_from_the_periods_first_hour_and_each_hour_once_however_often_read() -> None:
    """The charges are read again from reads_from() each time the mark moves: an hour read twice is counted once,
    whether it was still open (kept as read) or whole (folded)."""
    rows = [
        ChargeRow(hour=H - 1, key_id="k", model="m", gpu_class="H100", busy_s=1000.0, cost=1.0),  # yesterday
        ChargeRow(hour=H, key_id="k", model="m", gpu_class="H100", busy_s=100.0, cost=0.1),
        ChargeRow(hour=H + 1, key_id="k", model="m", gpu_class="H100", busy_s=10.0, cost=0.01),
    ]

    def charges_since(since: float) -> list[ChargeRow]:
        return [r for r in rows if r.hour * 3600 >= since]

    b = budgets()
    for mark in (DAY + 600, DAY + 2 * 3600 + 600, DAY + 3 * 3600):
        b.landed(mark, charges_since(b.reads_from()))
        assert figures(b.spent("k", "day", NOON)) == pytest.approx((110.0, 0.11)), mark
        assert figures(b.spent("k", "month", NOON)) == pytest.approx((1110.0, 1.11)), mark
