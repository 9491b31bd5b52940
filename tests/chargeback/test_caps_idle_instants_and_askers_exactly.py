"""The rules the adversarial property test holds in aggregate, each held exactly where a changed operator would go
unseen there (the mutation run of 2026-12-07, docs/reliability.md): a key's cap is the union of its own requests'
times, not each request's; a key's requests share what it got by their own work; a stretch's split by work holds
however small the work; idle time follows each key's recency instant by instant, to the last user by time when
nobody is recent; a wait asks for a load once, in the piece holding its start."""

from __future__ import annotations

import pytest

from llmgw.chargeback import charge_window
from llmgw.chargeback.idle import idle_gaps, split_gap
from llmgw.chargeback.sharing import busy_shares
from llmgw.config.chargeback import ChargebackConfig
from tests.chargeback.test_a_load_is_charged_to_the_keys_that_asked_for_it import wait
from tests.chargeback.test_gpu_time_attribution import CONFIG, by_key, req, span


def test_a_keys_cap_is_the_union_of_its_own_requests_times() -> None:
    flights = [("h1", 0.0, 1.0, 100.0), ("h2", 0.0, 1.0, 100.0), ("h3", 2.0, 3.0, 100.0), ("x", 0.0, 100.0, 1.0)]
    shares, busy = busy_shares(flights, 0.0, 100.0, 1.0, {"h1": "H", "h2": "H", "h3": "H", "x": "X"})
    assert busy == 100.0
    assert shares["h1"] + shares["h2"] + shares["h3"] == pytest.approx(2.0)  # [0, 1) and [2, 3): two seconds
    assert shares["x"] == pytest.approx(98.0)
    # without keys each request is its own: two overlapping requests of one key capped at a second each
    alone, _ = busy_shares(flights, 0.0, 100.0, 1.0)
    assert alone["h1"] + alone["h2"] + alone["h3"] == pytest.approx(3.0)


def test_a_keys_requests_share_what_it_got_by_their_own_work() -> None:
    shares, _ = busy_shares([("a1", 0.0, 10.0, 30.0), ("a2", 0.0, 10.0, 10.0)], 0.0, 10.0, 1.0,
                            {"a1": "A", "a2": "A"})
    assert shares == {"a1": pytest.approx(7.5), "a2": pytest.approx(2.5)}
    small, _ = busy_shares([("a1", 0.0, 10.0, 0.3), ("a2", 0.0, 10.0, 0.1)], 0.0, 10.0, 1.0, {"a1": "A", "a2": "A"})
    assert small == {"a1": pytest.approx(7.5), "a2": pytest.approx(2.5)}


def test_a_split_by_work_holds_however_small_the_work_and_by_time_however_short_the_stretch() -> None:
    shares, _ = busy_shares([("a", 0.0, 10.0, 0.25), ("b", 0.0, 10.0, 0.5)], 0.0, 10.0, 1.0)
    assert shares == {"a": pytest.approx(10 / 3), "b": pytest.approx(20 / 3)}
    shares, _ = busy_shares([("a", 0.0, 0.4, 0.0), ("b", 0.0, 0.1, 0.0)], 0.0, 0.4, 1.0)
    assert shares == {"a": pytest.approx(0.32), "b": pytest.approx(0.08)}


def test_idle_follows_each_keys_recency_and_goes_to_the_last_user_by_time() -> None:
    keys, used = {"A": 1.0, "B": 1.0}, {"A": 1.0, "B": 6.0}
    got: dict[str, float] = {}
    left = split_gap(6.0, 20.0, 1.0, 5.0, keys, used, lambda k, t: got.__setitem__(k, got.get(k, 0.0) + t))
    # [6, 11): B alone (A's recency ended at 6); [11, 20): nobody recent: the last user, B
    assert left == 0.0 and got == {"B": pytest.approx(14.0)}
    got = {}
    split_gap(2.0, 20.0, 1.0, 5.0, {"A": 1.0, "B": 3.0}, {"A": 1.0, "B": 2.0},
              lambda k, t: got.__setitem__(k, got.get(k, 0.0) + t))
    # [2, 6): A (to 6) and B (to 7) by 1 to 3; [6, 7): B alone; [7, 20): the last user by time, B (not A by name)
    assert got == {"A": pytest.approx(1.0), "B": pytest.approx(3.0 + 1.0 + 13.0)}
    got = {}
    split_gap(10.0, 20.0, 1.0, 5.0, {"A": 1.0, "Z": 1.0}, {"A": 9.0, "Z": 1.0},
              lambda k, t: got.__setitem__(k, got.get(k, 0.0) + t))
    assert got == {"A": pytest.approx(10.0)}  # [10, 14) A recent; then A still the last user, though Z sorts after


def test_a_keys_last_use_is_its_latest_end_not_its_latest_start() -> None:
    class R:
        def __init__(self, rid: str, key: str, start: float, dur: float) -> None:
            self.id, self.key_id, self.started_at, self.duration_s = rid, key, start, dur

    reqs = [R("a1", "A", 0.0, 10.0), R("a2", "A", 1.0, 1.0), R("b1", "B", 3.0, 1.0)]
    keys: dict[str, float] = {}
    used: dict[str, float] = {}
    gaps = []
    for u, v in idle_gaps(reqs, {"a1": 5.0, "a2": 1.0, "b1": 1.0}, 0.0, 20.0, keys, used):
        gaps.append((u, v))
    assert gaps == [(10.0, 20.0)] and used == {"A": 10.0, "B": 4.0} and keys == {"A": 6.0, "B": 1.0}
    acc = charge_window(0, 20, [span(ready=0.0)], [req("A", 0, 10), req("A", 1, 1, id="a" * 9), req("B", 3, 1)],
                        ChargebackConfig(rates={"H100": 3.6}))
    # busy [0, 10): B capped at its one second, A the other nine; idle [10, 20) by that use, 9 to 1
    assert by_key(acc)["A"] == pytest.approx((9.0, 0.0, 9.0)) and by_key(acc)["B"] == pytest.approx((1.0, 0.0, 1.0))


def test_a_first_use_in_a_piece_starts_its_recency_then() -> None:
    s = span(ready=0.0).model_copy(update={"keep_for": 5.0})
    acc = charge_window(0, 20, [s], [req("A", 0, 1), req("B", 2, 1)], CONFIG)
    # [1, 2): A; [3, 6): A and B by use; [6, 8): B; [8, 20): the last user, B
    assert by_key(acc)["A"][2] == pytest.approx(1.0 + 1.5)
    assert by_key(acc)["B"][2] == pytest.approx(1.5 + 2.0 + 12.0)


def test_a_wait_ending_as_the_residency_begins_asked_for_an_earlier_one() -> None:
    acc = charge_window(0, 60, [span(created=10.0, ready=30.0)], [req("B", 30.0, 1.0)], CONFIG,
                        [wait("A", 0.0, 10.0), wait("B", 20.0, 10.0)])
    assert "A" not in by_key(acc) and by_key(acc)["B"][1] == pytest.approx(20.0)


def test_a_wait_starting_at_a_windows_end_is_counted_once() -> None:
    waits = [wait("A", 0.0, 25.0), wait("B", 10.0, 15.0)]
    first = charge_window(0, 10, [span(ready=25.0)], [], CONFIG, waits)
    second = charge_window(10, 20, first.spans, [], CONFIG, waits)
    assert by_key(second) == {"A": (0.0, 5.0, 0.0), "B": (0.0, 5.0, 0.0)}


def test_a_window_caps_each_key_by_its_own_requests_union() -> None:
    reqs = [req("H", 0, 1, id="h" * 8, completion=100), req("H", 0, 1, id="i" * 8, completion=100),
            req("X", 0, 100, id="x" * 8, prompt=0, completion=1)]
    got = by_key(charge_window(0, 100, [span()], reqs, CONFIG))
    assert got["H"][0] == pytest.approx(1.0) and got["X"][0] == pytest.approx(99.0)


def test_a_load_pending_over_windows_adds_up() -> None:
    first = charge_window(0, 10, [span(ready=25.0)], [], CONFIG)
    second = charge_window(10, 20, first.spans, [], CONFIG)
    assert second.spans[0].pending_s == 20.0  # nobody asked yet: both windows' load wait for whoever does


def test_a_keys_last_use_carries_into_the_next_window_by_its_end() -> None:
    s = span(ready=0.0).model_copy(update={"keep_for": 5.0})
    first = charge_window(0, 10, [s], [req("A", 0, 8, prompt=0), req("A", 1, 1, id="a" * 9, prompt=0),
                                       req("B", 0, 1, completion=50)], CONFIG)
    assert first.spans[0].used_at == {"A": 8.0, "B": 1.0}  # its latest end, whichever of its requests ended last
    second = charge_window(10, 20, first.spans, [], CONFIG)
    assert by_key(second) == {"A": (0.0, 0.0, 10.0)}  # recent to 13, then the last user


def test_idle_is_split_by_all_of_a_keys_use_and_a_pending_load_goes_to_its_first_askers() -> None:
    acc = charge_window(0, 10, [span()], [req("A", 0, 4), req("A", 1, 1, id="a" * 9), req("B", 5, 1)], CONFIG)
    # [4, 5) A's alone; [6, 10) by A's four GPU-seconds (both its requests) to B's one
    assert by_key(acc)["A"][2] == pytest.approx(1.0 + 4 * 4 / 5) and by_key(acc)["B"][2] == pytest.approx(4 / 5)
    first = charge_window(0, 10, [span(ready=20.0)], [], CONFIG)  # loading, nobody asked yet
    second = charge_window(10, 20, first.spans, [], CONFIG, [wait("A", 12.0, 8.0)])
    assert by_key(second) == {"A": (0.0, 20.0, 0.0)} and second.spans[0].pending_s == 0.0


def test_a_keys_use_carried_into_the_next_window_sums_all_its_requests() -> None:
    first = charge_window(0, 10, [span()], [req("A", 0, 2), req("A", 3, 1, id="a" * 9), req("B", 5, 1)], CONFIG)
    assert first.spans[0].keys == {"A": 3.0, "B": 1.0}
    second = charge_window(10, 20, first.spans, [], CONFIG)
    assert by_key(second) == {"A": (0.0, 0.0, 7.5), "B": (0.0, 0.0, 2.5)}
