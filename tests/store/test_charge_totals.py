"""A usage view per key or model (/api/usage, the dashboard) reads the hourly charges summed in the store: one row
per key and model however many hours and GPU classes the period holds, the same sums as adding the rows up."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from llmgw.records.chargeback import OPERATOR, ChargeRow
from llmgw.store.sql import SqlStore

H = 3600.0


def charge(hour: int, key: str, model: str, cls: str, busy: float) -> ChargeRow:
    return ChargeRow(hour=hour, key_id=key, model=model, gpu_class=cls, busy_s=busy, load_s=busy / 4,
                     idle_s=busy / 8, cost=busy / 100)


def test_charges_are_summed_per_key_and_model_in_the_store(opener: Callable[[], SqlStore]) -> None:
    s = opener()
    rows = [charge(h, k, m, c, 1.0 + h % 7) for h in range(1000, 1000 + 30 * 24) for k in ("a", "b", OPERATOR)
            for m in ("m", "n") for c in ("H100", "A100")]
    s.put_charges(rows, [], 0.0, 0.0)
    since = 1000 * H + 24 * H + 1800  # from the hour holding it, as charges_since
    want: dict[tuple[str, str], list[float]] = {}
    for r in s.charges_since(since):
        acc = want.setdefault((r.key_id, r.model), [0.0] * 4)
        for i, v in enumerate((r.busy_s, r.load_s, r.idle_s, r.cost)):
            acc[i] += v
    got = s.charges_by_key_model(since)
    assert len(got) == 6  # keys and the operator, by models: not hours, not GPU classes
    for r in got:
        assert [r.busy_s, r.load_s, r.idle_s, r.cost] == pytest.approx(want[(r.key_id, r.model)])
    assert s.charges_by_key_model(2000 * H) == []
