"""Shares however small: busy time goes by work even when the work is one token, a request reporting none at its
neighbours' rate over its own time, by time in flight only when no request in the stretch did any, and idle time is
split by the residency's keys even when they used under a GPU-second between them."""

from __future__ import annotations

import pytest

from llmgw.chargeback import charge_window
from llmgw.chargeback.sharing import busy_shares
from tests.chargeback.test_gpu_time_attribution import CONFIG, by_key, req, span


def test_a_request_that_reported_no_work_pays_its_time_beside_one_that_did() -> None:
    """Found from outside: a stream cut short records no prompt tokens, a request whose client left records none at
    all, and such a request paid no busy time, its neighbours paying its time. It is taken to have worked at their
    rate over its own time in flight."""
    shares, busy = busy_shares([("a", 0.0, 10.0, 1.0), ("b", 0.0, 10.0, 0.0)], 0.0, 10.0, 1.0)
    assert (shares, busy) == ({"a": 5.0, "b": 5.0}, 10.0)
    shares, _ = busy_shares([("a", 0.0, 10.0, 30.0), ("b", 0.0, 5.0, 0.0), ("c", 0.0, 10.0, 10.0)], 0.0, 10.0, 1.0)
    assert shares == {"a": pytest.approx(6.0), "b": pytest.approx(2.0), "c": pytest.approx(2.0)}  # b: 5 s at 2 a second


def test_a_stretch_with_no_work_is_split_by_each_requests_time_in_flight() -> None:
    shares, busy = busy_shares([("a", 0.0, 10.0, 0.0), ("b", 5.0, 10.0, 0.0)], 0.0, 10.0, 2.0)
    assert busy == 10.0
    assert shares == {"a": pytest.approx(40 / 3), "b": pytest.approx(20 / 3)}


def test_idle_time_is_split_by_keys_that_used_under_a_gpu_second() -> None:
    acc = charge_window(0, 10, [span()], [req("A", 0, 0.2, prompt=0), req("B", 5, 0.3, prompt=0)], CONFIG)
    got = by_key(acc)
    # [0.2, 5) A's alone (B had not used it yet); [5.3, 10) by 0.2 to 0.3
    assert got["A"] == pytest.approx((0.2, 0.0, 4.8 + 4.7 * 0.4))
    assert got["B"] == pytest.approx((0.3, 0.0, 4.7 * 0.6))
