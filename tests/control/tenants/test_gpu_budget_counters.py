"""Budgets in GPU-seconds or money as the control plane keeps them (control/tenants/gpu_budgets.py through
LimitCounters): chargeback's charges read from the real store, requests in flight holding their bound, settled
requests counted until their charges land. An in-process control plane over SQLite in tmp_path with a FakeClock; its
model "m" has no replica, so a request of it is taken to hold the 4 GPUs its profile asks for."""

from __future__ import annotations

import calendar
from pathlib import Path

from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.core.gpu_budget import GpuUse, Size
from llmgw.core.limits import KeyLimits, LimitRefusal
from llmgw.records.chargeback import ChargeRow
from llmgw.store.base import ApiKeyRecord, UsageRecord, hour_of
from tests.harness import plane_in

NOON = float(calendar.timegm((2026, 12, 15, 12, 0, 0)))


def charge(p: ControlPlane, key_id: str, to: float, *, busy: float = 0.0, load: float = 0.0, idle: float = 0.0,
           at: float = NOON - 3600, cost: float = 0.0) -> None:
    """Chargeback's step, as the store takes it: charges for the hour holding `at`, the mark moved to `to`."""
    row = ChargeRow(hour=hour_of(at), key_id=key_id, model="m", gpu_class="H100", busy_s=busy, load_s=load,
                    idle_s=idle, cost=cost)
    p.store.put_charges([row], [], p.store.charge_mark(), to)


async def key(p: ControlPlane, name: str, lim: KeyLimits) -> ApiKeyRecord:
    _, k = await p.credentials.create_key(name, [], lim)
    return k


async def test_a_key_whose_landed_charges_pass_its_gpu_budget_is_refused_and_another_admitted(tmp_path: Path) -> None:
    p = plane_in(tmp_path, FakeClock(NOON))
    over = await key(p, "over", KeyLimits(gpu_budget=1_000.0, budget_period="day"))
    within = await key(p, "within", KeyLimits(gpu_budget=1_000.0, budget_period="day"))
    # busy, load and idle all count: 900 + 50 + 60 = 1010 GPU-seconds today
    charge(p, over.id, NOON - 600, busy=900.0, load=50.0, idle=60.0)
    charge(p, within.id, NOON - 300, busy=500.0)
    await p.limit_counters.gpu.refresh(p.storage)
    d, ticket = p.limit_counters.admit(over, 1, model="m")
    assert d.refusal == LimitRefusal.Quota and ticket == ""
    assert "1010.00 of 1000 GPU-seconds this day" in d.message
    d, ticket = p.limit_counters.admit(within, 100, model="m")  # 100 tokens at 10/s on 4 GPUs: 40 GPU-s
    assert d.admitted and ticket
    assert p.limit_counters.use_of(within)["gpu_used"] == 540.0


async def test_charges_from_yesterday_do_not_count_in_todays_budget(tmp_path: Path) -> None:
    p = plane_in(tmp_path, FakeClock(NOON))
    k = await key(p, "k", KeyLimits(gpu_budget=100.0, budget_period="day"))
    charge(p, k.id, NOON - 600, busy=5_000.0, at=NOON - 86400)
    charge(p, k.id, NOON - 300, busy=50.0)
    await p.limit_counters.gpu.refresh(p.storage)
    assert p.limit_counters.use_of(k)["gpu_used"] == 50.0
    assert p.limit_counters.admit(k, 125, model="m")[0].admitted  # 50 GPU-s asked: exactly 100


async def test_requests_in_flight_hold_their_bound_and_give_it_back_when_settled(tmp_path: Path) -> None:
    p = plane_in(tmp_path, FakeClock(NOON))
    k = await key(p, "k", KeyLimits(gpu_budget=120.0, budget_period="day"))
    tickets = [p.limit_counters.admit(k, 100, model="m")[1] for _ in range(3)]  # 40 GPU-s each
    assert all(tickets)
    d, _ = p.limit_counters.admit(k, 100, model="m")
    assert d.refusal == LimitRefusal.Quota and "120.00 of 120 GPU-seconds" in d.message
    assert p.limit_counters.settle(tickets[0], 0)  # reached no engine: nothing spent, its hold given back
    assert p.limit_counters.admit(k, 100, model="m")[0].admitted


async def test_a_settled_request_counts_until_its_charges_land_then_the_charges_do(tmp_path: Path) -> None:
    clock = FakeClock(NOON)
    p = plane_in(tmp_path, clock)
    k = await key(p, "k", KeyLimits(gpu_budget=1_000.0, budget_period="day"))
    d, ticket = p.limit_counters.admit(k, 100, model="m")
    assert d.admitted
    clock.advance(4.0)
    assert p.limit_counters.settle(ticket, 80)
    assert p.limit_counters.use_of(k)["gpu_used"] == 16.0  # 4 GPUs for the 4 s it was admitted
    charge(p, k.id, NOON + 60, busy=1.5, at=NOON)  # its share, as chargeback found it, once its window settled
    await p.limit_counters.gpu.refresh(p.storage)
    assert p.limit_counters.use_of(k)["gpu_used"] == 1.5


async def test_usage_recorded_sets_the_models_speed_for_the_next_reservations(tmp_path: Path) -> None:
    p = plane_in(tmp_path, FakeClock(NOON))
    k = await key(p, "k", KeyLimits(gpu_budget=100.0, budget_period="day"))
    assert not p.limit_counters.admit(k, 300, model="m")[0].admitted  # 300 tokens at the default 10/s: 120 GPU-s
    await p.activity.record_usage([UsageRecord(id=f"request-{i}", key_id=k.id, model="m", replica_id="m-1",
                                               prompt_tokens=100, completion_tokens=200, started_at=NOON - 10,
                                               duration_s=2.0, status=200) for i in range(5)])
    d, _ = p.limit_counters.admit(k, 300, model="m")  # 100 tokens generated per second measured: 12 GPU-s
    assert d.admitted
    assert p.limit_counters.use_of(k)["gpu_used"] == 12.0


async def test_a_cost_budget_reserves_at_the_rate_of_the_models_gpus(tmp_path: Path) -> None:
    clock = FakeClock(NOON)
    p = plane_in(tmp_path, clock)
    p.limit_counters.gpu.sized_by(lambda model: Size(gpus=8, rate=36.0))  # 0.01 per GPU-s
    k = await key(p, "k", KeyLimits(cost_budget=1.0, budget_period="month"))
    charge(p, k.id, NOON - 600, busy=90.0, cost=0.9)
    await p.limit_counters.gpu.refresh(p.storage)
    assert p.limit_counters.admit(k, 10, model="m")[0].admitted  # 1 s on 8 GPUs: 0.08
    d, _ = p.limit_counters.admit(k, 10, model="m")
    assert d.refusal == LimitRefusal.Quota and "cost budget spent: 0.98 of 1 USD this month" in d.message
    assert p.limit_counters.gpu.held[k.id] == GpuUse(8.0, 0.08)


async def test_a_gpu_budget_refusal_takes_nothing_from_the_keys_other_limits(tmp_path: Path) -> None:
    p = plane_in(tmp_path, FakeClock(NOON))
    k = await key(p, "k", KeyLimits(rpm=1, concurrency=1, gpu_budget=50.0, budget_period="day"))
    d, _ = p.limit_counters.admit(k, 200, model="m")  # 80 GPU-s asked
    assert d.refusal == LimitRefusal.Quota
    use = p.limit_counters.use_of(k)
    assert (use["in_flight"], use["requests_left"], use["gpu_used"]) == (0, None, 0.0)  # no bucket even made
    d, ticket = p.limit_counters.admit(k, 100, model="m")  # 40 GPU-s: the one request a minute still there
    assert d.admitted
    assert p.limit_counters.settle(ticket, 50)
    assert p.limit_counters.admit(k, 1, model="m")[0].refusal == LimitRefusal.Rate  # and now taken
