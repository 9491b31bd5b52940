"""A min >= 1 model's replica charges its idle time to the operator, never split by keys: its span carries no
per-key figures, which would otherwise grow with every key it serves for as long as it lives and be written whole
each window."""

from __future__ import annotations

from llmgw.chargeback import charge_window
from llmgw.config.chargeback import ChargebackConfig
from llmgw.records.chargeback import OPERATOR, ReplicaSpan
from llmgw.store.base import UsageRecord


def test_an_operator_spans_busy_keys_are_not_carried() -> None:
    span = ReplicaSpan(id="r1", model="m", gpus=1, gpu_class="H100", demand=False, created_at=0.0, ready_at=0.0)
    reqs = [UsageRecord(id=f"req-{i:05d}", key_id=f"key-{i}", model="m", replica_id="r1", prompt_tokens=1,
                        completion_tokens=1, started_at=float(i), duration_s=0.5, status=200) for i in range(50)]
    acc = charge_window(0, 60, [span], reqs, ChargebackConfig())
    (s,) = acc.spans
    assert s.keys == {}
    rows = {r.key_id: r for r in acc.rows}
    assert rows[OPERATOR].idle_s == 35.0 and sum(r.busy_s for r in acc.rows) == 25.0
