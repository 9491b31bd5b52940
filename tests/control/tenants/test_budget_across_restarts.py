"""Budgets across restarts and limit changes (control/tenants/limit_counters.py, ControlPlane.load): an in-process
control plane over SQLite in tmp_path with a FakeClock."""

from __future__ import annotations

from pathlib import Path

from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.core.limits import KeyLimits
from llmgw.store.base import UsageRecord
from tests.harness import plane_in


def plane(tmp_path: Path, clock: FakeClock) -> ControlPlane:
    return plane_in(tmp_path, clock)


def spend(p: ControlPlane, key_id: str, tokens: int, at: float) -> None:
    p.store.add_usage_new([UsageRecord(key_id=key_id, model="m", replica_id="r", prompt_tokens=tokens,
                                       completion_tokens=0, started_at=at, duration_s=1.0, status=200)])


async def test_a_total_budget_spent_before_a_restart_stays_spent(tmp_path: Path) -> None:
    clock = FakeClock()
    p = plane(tmp_path, clock)
    for period in ("day", "total"):
        _, rec = await p.credentials.create_key(period, [], KeyLimits(budget=1_000, budget_period=period))
        spend(p, rec.id, 900, clock.now())  # recorded before the restart
    p.store.close()
    p = plane(tmp_path, clock)  # a restart: the plane seeds what each key spent from the store
    keys = {k.name: k for k in p.store.list_keys()}
    assert not p.limit_counters.admit(keys["day"], 500)[0].admitted  # the day budget remembers: 900 + 500 > 1000
    d, _ = p.limit_counters.admit(keys["total"], 500)
    assert not d.admitted, "a total budget is forgotten at every restart: 900 spent, 500 more admitted on 1000"
