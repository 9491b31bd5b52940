"""What a server writes of the nodes it heard (control/ha/liveness.py): a row every pass, the nodes heard within the
window only; the others' rows taken in once each; a leader that writes no row is of an older release."""

from __future__ import annotations

from llmgw.control.ha.liveness import Liveness


def test_a_row_is_written_every_pass_and_holds_the_window_only() -> None:
    live = Liveness(window=3.0)
    assert live.row({"n1": 100.0, "n2": 90.0}, 101.0) == {"n1": 100.0}
    assert live.row({"n1": 100.0, "n2": 90.0}, 102.0) == {"n1": 100.0}  # nobody heard since: written all the same
    assert live.row({"n1": 100.0}, 104.0) == {}  # nobody within the window: an empty row says this server is new
    assert live.row({"n1": 102.5, "n2": 90.0}, 103.0) == {"n1": 102.5}


def test_after_the_clock_steps_back_the_hearings_since_are_still_written() -> None:
    live = Liveness(window=3.0)
    assert live.row({"n1": 100.0}, 100.5) is not None
    assert live.row({"n1": 40.2}, 40.5) == {"n1": 40.2}, "stepped back a minute: n1 renewing, yet nothing written"


def test_the_others_rows_are_taken_once_each_and_this_servers_own_never() -> None:
    live = Liveness(window=3.0)
    rows = [("a", 100.0, {"n1": 99.0}), ("b", 100.0, {"n2": 99.5})]
    assert live.taken(rows, "a", 100.5) == [("n2", 99.5)]
    assert live.taken(rows, "a", 101.5) == []  # the same rows read again
    assert live.taken([("b", 101.0, {"n2": 100.5})], "a", 102.0) == [("n2", 100.5)]


def test_a_leader_with_no_fresh_row_is_older_but_never_this_server_nor_no_one() -> None:
    rows = [("a", 100.0, {}), ("b", 80.0, {"n2": 79.0})]
    for leader, older in (("a", False), ("b", True), ("c", True), ("me", False), ("", False)):
        live = Liveness(window=3.0)
        assert not live.older_leader(rows, leader, "me", 98.0)  # just seen leading: its first row may be on its way
        assert live.older_leader(rows, leader, "me", 101.0) == older, leader  # b's last row is too old; c has none
