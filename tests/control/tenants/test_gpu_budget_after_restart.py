"""A server restarted goes on counting, against GPU budgets, the requests that ended after chargeback's mark (their
charges have not landed yet), as it did before it stopped: from their usage records, read again at start. A real
control plane over SQLite in tmp_path with a FakeClock; model "m" has no replica, so it holds the 4 GPUs its profile
asks for."""

from __future__ import annotations

import calendar
from pathlib import Path

from llmgw.core.clock import FakeClock
from llmgw.core.limits import KeyLimits, LimitRefusal
from llmgw.records.chargeback import ChargeRow
from llmgw.store.base import UsageRecord, hour_of
from tests.harness import plane_in

NOON = float(calendar.timegm((2026, 12, 15, 12, 0, 0)))


async def test_requests_settled_after_the_mark_still_count_after_a_restart(tmp_path: Path) -> None:
    clock = FakeClock(NOON)
    p = plane_in(tmp_path, clock)
    p.store.put_charges([], [], 0.0, NOON - 600)  # chargeback is 10 minutes behind
    _, k = await p.credentials.create_key("k", [], KeyLimits(gpu_budget=200.0, budget_period="day"))
    d, ticket = p.limit_counters.admit(k, 100, model="m")
    assert d.admitted
    clock.advance(30)
    await p.activity.record_usage([UsageRecord(id="request-1", key_id=k.id, model="m", replica_id="m-1",
                                               prompt_tokens=50, completion_tokens=50, started_at=NOON,
                                               duration_s=30.0, status=200)])
    assert p.limit_counters.settle(ticket, 100)
    assert p.limit_counters.use_of(k)["gpu_used"] == 120.0  # 4 GPUs for 30 s
    again = plane_in(tmp_path, clock)  # a restart, before the charges for that time land
    assert again.limit_counters.use_of(k)["gpu_used"] == 120.0
    d, _ = again.limit_counters.admit(k, 300, model="m")  # 300 tokens at 10/s on 4 GPUs: 120 more, past 200
    assert d.refusal == LimitRefusal.Quota and "120.00 of 200 GPU-seconds" in d.message, d.message
    row = ChargeRow(hour=hour_of(NOON), key_id=k.id, model="m", gpu_class="H100", busy_s=30.0, load_s=0.0,
                    idle_s=0.0)
    again.store.put_charges([row], [], NOON - 600, NOON + 60)  # its charges land: they replace the figure
    await again.limit_counters.gpu.refresh(again.storage)
    assert again.limit_counters.use_of(k)["gpu_used"] == 30.0
