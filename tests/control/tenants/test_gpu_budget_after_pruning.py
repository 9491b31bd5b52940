"""A `total` budget in GPU-seconds or money counts what the key was charged before the store's retention pruned the
hourly charges: a control plane started after the prune (a restart, another server) reads the pruned sums too.
Real control planes over one SQLite store in tmp_path, with a FakeClock."""

from __future__ import annotations

import calendar
from pathlib import Path

from llmgw.core.clock import FakeClock
from llmgw.core.limits import KeyLimits, LimitRefusal
from llmgw.records.chargeback import ChargeRow
from llmgw.store.base import hour_of
from tests.harness import plane_in

NOON = float(calendar.timegm((2026, 12, 15, 12, 0, 0)))
DAY = 86400.0


async def test_a_total_gpu_budget_counts_charges_pruned_before_a_restart(tmp_path: Path) -> None:
    clock = FakeClock(NOON)
    p = plane_in(tmp_path, clock)
    _, k = await p.credentials.create_key("k", [], KeyLimits(gpu_budget=1_000.0, cost_budget=10.0,
                                                             budget_period="total"))
    old, recent = NOON - 100 * DAY, NOON - 2 * 3600
    for at, busy, cost in ((old, 800.0, 8.0), (old + 3600, 50.0, 0.5), (recent, 100.0, 1.0)):
        row = ChargeRow(hour=hour_of(at), key_id=k.id, model="m", gpu_class="H100", busy_s=busy, load_s=0.0,
                        idle_s=0.0, cost=cost)
        p.store.put_charges([row], [], p.store.charge_mark(), at + 3600)
    p.store.prune(NOON - 90 * DAY, NOON - 30 * DAY)  # the two old hours go
    assert [r.hour for r in p.store.charges_since(0.0)] == [hour_of(recent)]  # reports see what is kept
    again = plane_in(tmp_path, clock)  # a restart
    use = again.limit_counters.use_of(k)
    assert use["gpu_used"] == 950.0 and use["cost_used"] == 9.5
    d, _ = again.limit_counters.admit(k, 1_000, model="m")  # 100 s on 4 GPUs: 400 GPU-s, past 1000
    assert d.refusal == LimitRefusal.Quota and "950.00 of 1000 GPU-seconds" in d.message, d.message
    p.store.prune(NOON - 90 * DAY, NOON - 30 * DAY)  # pruning again keeps the sums whole
    assert plane_in(tmp_path, clock).limit_counters.use_of(k)["gpu_used"] == 950.0
