"""Hourly charges past retention are pruned from the reports but summed per key, model and class first, so that a
`total` GPU budget still counts them (store.pruned_charges); on both stores."""

from __future__ import annotations

from collections.abc import Callable

from llmgw.records.chargeback import ChargeRow
from llmgw.store.sql import SqlStore

H = 3600.0


def row(hour: int, key: str, busy: float, cost: float, gpu_class: str = "H100") -> ChargeRow:
    return ChargeRow(hour=hour, key_id=key, model="m", gpu_class=gpu_class, busy_s=busy, load_s=1.0, idle_s=2.0,
                     cost=cost)


def test_pruned_charges_are_kept_as_sums_the_reports_do_not_read(opener: Callable[[], SqlStore]) -> None:
    s = opener()
    s.put_charges([row(10, "a", 5.0, 0.5), row(11, "a", 7.0, 0.7), row(11, "b", 1.0, 0.1),
                   row(11, "b", 1.0, 0.1, "A100"), row(20, "a", 3.0, 0.3)], [], 0.0, 21 * H)
    s.prune(12 * H, 0.0)
    assert [(r.hour, r.key_id) for r in s.charges_since(0.0)] == [(20, "a")]
    kept = sorted((r.key_id, r.gpu_class, r.busy_s, r.load_s, r.idle_s, round(r.cost, 9), r.hour)
                  for r in s.pruned_charges())
    assert kept == [("a", "H100", 12.0, 2.0, 4.0, 1.2, 0), ("b", "A100", 1.0, 1.0, 2.0, 0.1, 0),
                    ("b", "H100", 1.0, 1.0, 2.0, 0.1, 0)]
    s.put_charges([row(13, "a", 4.0, 0.4)], [], 21 * H, 22 * H)
    s.prune(15 * H, 0.0)  # a later prune adds to the sums
    assert [r.busy_s for r in s.pruned_charges() if r.key_id == "a"] == [16.0]
    assert [(r.hour, r.key_id) for r in s.charges_since(0.0)] == [(20, "a")]
