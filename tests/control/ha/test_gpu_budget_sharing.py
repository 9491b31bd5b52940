"""Budgets in GPU-seconds held across servers on one store: what a key's requests hold, and settled since the
chargeback's mark, at one server counts at the others until its charges land or that server falls silent. Two
control planes on one real PostgreSQL (tests/control/ha/conftest.py); model "m" has no replica and asks for no GPU, so
a request reserving 100 tokens holds 1 device for 10 s at the default speed: 10 GPU-seconds."""

from __future__ import annotations

from llmgw.control.activity.activity import REPORTER_SILENT_AFTER
from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.core.limits import KeyLimits, LimitRefusal


async def share(*planes: ControlPlane) -> None:
    for p in planes:
        await p.following.share_activity()


async def test_a_keys_gpu_budget_counts_what_another_server_holds_and_settled(
        two: tuple[ControlPlane, ControlPlane, FakeClock]) -> None:
    a, b, clock = two
    _, key = await a.credentials.create_key("t", [], KeyLimits(gpu_budget=25.0, budget_period="day"))
    await share(a, b)
    d, ticket = b.limit_counters.admit(key, 100, model="m")
    assert d.admitted and b.limit_counters.admit(key, 100, model="m")[0].admitted  # 20 GPU-s held at b
    await share(b, a)
    d, _ = a.limit_counters.admit(key, 100, model="m")
    assert d.refusal == LimitRefusal.Quota and "20.00 of 25 GPU-seconds" in d.message, d.message
    clock.advance(2.0)
    assert b.limit_counters.settle(ticket, 50)  # held 10, settled at one device for 2 s
    await share(b, a)
    assert a.limit_counters.use_of(key)["gpu_used"] == 12.0
    assert a.limit_counters.admit(key, 100, model="m")[0].admitted  # 12 + 10 <= 25
    # b dies with its request in flight; its figures stop counting once its rows are older than the others allow
    for _ in range(int(REPORTER_SILENT_AFTER) + 2):
        clock.advance(1)
        await share(a)
    assert a.limit_counters.use_of(key)["gpu_used"] == 10.0  # a's own request, still in flight
