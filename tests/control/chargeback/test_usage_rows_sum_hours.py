"""The usage view's rows (control/chargeback/charge_views.py, pure): per key or model, every hour's tokens and GPU
time summed, the operator's share last and named, a key no longer known left unnamed."""

from __future__ import annotations

import pytest

from llmgw.control.chargeback.charge_views import OPERATOR_NAME, by_key, usage_rows
from llmgw.records.chargeback import OPERATOR, ChargeRow
from llmgw.store.base import UsageTotal

H = 490_000  # an hour since 1970


def total(key: str, model: str, requests: int, prompt: int, completion: int) -> UsageTotal:
    return UsageTotal(key_id=key, model=model, requests=requests, prompt_tokens=prompt,
                      completion_tokens=completion, last_at=0.0)


def charge(key: str, model: str, hour: int, busy: float, load: float, idle: float, cost: float) -> ChargeRow:
    return ChargeRow(hour=hour, key_id=key, model=model, gpu_class="H100", busy_s=busy, load_s=load, idle_s=idle,
                     cost=cost)


TOTALS = [total("k1", "m", 2, 10, 20), total("k1", "n", 3, 100, 200), total("k2", "m", 1, 1, 1)]
CHARGES = [charge("k1", "m", H, 1.0, 2.0, 3.0, 0.5), charge("k1", "n", H + 1, 10.0, 20.0, 30.0, 5.0),
           charge(OPERATOR, "m", H, 0.0, 0.0, 7.0, 0.25)]


def test_a_keys_row_sums_its_models_and_hours_and_the_operator_comes_last() -> None:
    rows = usage_rows(TOTALS, CHARGES, "key", {"k1": "team-a"})
    assert [(r["key"], r["name"]) for r in rows] == [("k1", "team-a"), ("k2", ""), (OPERATOR, OPERATOR_NAME)]
    k1 = rows[0]
    assert (k1["requests"], k1["prompt_tokens"], k1["completion_tokens"]) == (5, 110, 220)
    assert (k1["busy_s"], k1["load_s"], k1["idle_s"], k1["gpu_seconds"]) == (11.0, 22.0, 33.0, 66.0)
    assert k1["cost"] == pytest.approx(5.5)


def test_a_models_row_sums_its_keys_and_carries_no_name() -> None:
    rows = usage_rows(TOTALS, CHARGES, "model", {"k1": "team-a"})
    assert [r["model"] for r in rows] == ["m", "n"]
    m = rows[0]
    assert "name" not in m
    assert (m["requests"], m["prompt_tokens"], m["completion_tokens"]) == (3, 11, 21)
    assert (m["busy_s"], m["idle_s"], m["gpu_seconds"]) == (1.0, 10.0, 13.0)


def test_charges_by_key_sum_every_model_and_hour() -> None:
    got = by_key(CHARGES, {"k1": "team-a"}, "EUR")
    assert got.currency == "EUR"
    assert [(k.key_id, k.name, k.gpu_seconds, k.idle_s) for k in got.keys] == [
        ("k1", "team-a", 66.0, 33.0), (OPERATOR, OPERATOR_NAME, 7.0, 7.0)]
