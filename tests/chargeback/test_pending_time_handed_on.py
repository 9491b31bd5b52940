"""GPU time waiting for a party (a load or idle time before any request arrived) is handed on as soon as one is
known: to the request that triggered the residency in the window it arrives, or to the operator when the residency
ends without one, also when it ends exactly at a window's end or sleeps exactly at one."""

from __future__ import annotations

from llmgw.chargeback import charge_window
from llmgw.records.chargeback import OPERATOR
from tests.chargeback.test_gpu_time_attribution import CONFIG, by_key, req, span


def test_a_load_pending_for_a_window_is_charged_to_its_trigger_in_the_window_it_arrives() -> None:
    first = charge_window(0, 10, [span(ready=10.0)], [], CONFIG)  # loading the whole window, nobody asked yet
    assert first.rows == [] and first.spans[0].pending_s == 10.0
    second = charge_window(10, 20, first.spans, [req("A", 10, 5, prompt=0)], CONFIG)
    assert by_key(second) == {"A": (5.0, 10.0, 5.0)}
    assert (second.spans[0].pending_s, second.spans[0].pending_idle_s) == (0.0, 0.0)


def test_a_replica_ending_exactly_at_a_windows_end_hands_its_pending_time_to_the_operator() -> None:
    acc = charge_window(0, 10, [span(ended=10.0)], [], CONFIG)
    assert by_key(acc) == {OPERATOR: (0.0, 0.0, 10.0)}
    assert acc.spans[0].pending_idle_s == 0.0


def test_a_residency_asleep_from_a_windows_end_hands_its_pending_time_on_when_it_wakes() -> None:
    first = charge_window(0, 10, [span(asleep=[(10.0, 15.0)])], [], CONFIG)
    assert first.rows == [] and first.spans[0].pending_idle_s == 10.0
    second = charge_window(10, 20, first.spans, [], CONFIG)
    assert by_key(second) == {OPERATOR: (0.0, 0.0, 10.0)}  # the residency before the sleep served nobody
