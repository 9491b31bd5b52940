"""A replica woken in one window and kept warm into the next: the next window's time before its first request is
idle, split by the keys the residency served, not load charged again to the key that woke it."""

from __future__ import annotations

from llmgw.chargeback import charge_window
from llmgw.config.chargeback import ChargebackConfig
from llmgw.records.chargeback import ReplicaSpan
from llmgw.store.base import UsageRecord

CONFIG = ChargebackConfig(rates={"H100": 3.6})


def req(key: str, start: float, dur: float) -> UsageRecord:
    return UsageRecord(id=f"{key}-{start:08.3f}", key_id=key, model="m", replica_id="r1", prompt_tokens=1,
                       completion_tokens=1, started_at=start, duration_s=dur, status=200)


def test_a_woken_residencys_next_window_before_a_request_is_idle_not_load() -> None:
    span = ReplicaSpan(id="r1", model="m", gpus=1, gpu_class="H100", demand=True, created_at=0.0, ready_at=0.0,
                       asleep=[(0.0, 10.0)])
    first = charge_window(0, 60, [span], [req("A", 10, 10), req("B", 30, 10)], CONFIG)
    rows = {r.key_id: (r.busy_s, r.load_s, r.idle_s) for r in first.rows}
    assert rows == {"A": (10.0, 0.0, 20.0), "B": (10.0, 0.0, 10.0)}  # [20, 30) A's alone, [40, 60) halves
    second = charge_window(60, 120, first.spans, [req("B", 100, 10)], CONFIG)
    rows = {r.key_id: (r.busy_s, r.load_s, r.idle_s) for r in second.rows}
    # idle [60, 100) by what A (10) and B (10) were served, [110, 120) by A's 10 and B's 20; no load
    assert rows.keys() == {"A", "B"}
    assert rows["A"][:2] == (0.0, 0.0) and abs(rows["A"][2] - (20 + 10 / 3)) < 1e-9
    assert rows["B"][:2] == (10.0, 0.0) and abs(rows["B"][2] - (20 + 20 / 3)) < 1e-9
