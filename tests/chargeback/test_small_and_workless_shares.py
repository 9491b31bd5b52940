"""Shares however small: busy time goes by work even when the work is one token, by time in flight only when no
request in the stretch did any, and idle time is split by the residency's keys even when they used under a
GPU-second between them."""

from __future__ import annotations

import pytest

from llmgw.chargeback import charge_window
from llmgw.chargeback.sharing import busy_shares
from tests.chargeback.test_gpu_time_attribution import CONFIG, by_key, req, span


def test_a_request_that_did_no_work_pays_no_busy_time_beside_one_that_did() -> None:
    shares, busy = busy_shares([("a", 0.0, 10.0, 1.0), ("b", 0.0, 10.0, 0.0)], 0.0, 10.0, 1.0)
    assert (shares, busy) == ({"a": 10.0, "b": 0.0}, 10.0)


def test_a_stretch_with_no_work_is_split_by_each_requests_time_in_flight() -> None:
    shares, busy = busy_shares([("a", 0.0, 10.0, 0.0), ("b", 5.0, 10.0, 0.0)], 0.0, 10.0, 2.0)
    assert busy == 10.0
    assert shares == {"a": pytest.approx(40 / 3), "b": pytest.approx(20 / 3)}


def test_idle_time_is_split_by_keys_that_used_under_a_gpu_second() -> None:
    acc = charge_window(0, 10, [span()], [req("A", 0, 0.2, prompt=0), req("B", 5, 0.3, prompt=0)], CONFIG)
    got = by_key(acc)
    assert got["A"] == pytest.approx((0.2, 0.0, 3.8))
    assert got["B"] == pytest.approx((0.3, 0.0, 5.7))
