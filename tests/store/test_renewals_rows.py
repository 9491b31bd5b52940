"""The renewals table: one row per server, replaced whole; read by when it was written; pruned with the events."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given
from hypothesis import strategies as st

from llmgw.store.base import renewals_body, renewals_read
from llmgw.store.sql import SqlStore


def test_each_server_has_one_row_replaced_whole_and_read_after_a_time(opener: Callable[[], SqlStore]) -> None:
    s = opener()
    s.put_renewals("a", 100.0, {"n1": 99.5, "n2": 98.0})
    s.put_renewals("b", 101.0, {"n3": 100.25})
    s.put_renewals("a", 102.0, {"n1": 101.75})  # a's row again: n2 is no longer in it
    rows = {server: (at, heard) for server, at, heard in s.renewals(0.0)}
    assert set(rows) == {"a", "b"}
    assert rows["a"][0] == 102.0 and rows["a"][1].keys() == {"n1"}
    assert abs(rows["a"][1]["n1"] - 101.75) < 0.001 and abs(rows["b"][1]["n3"] - 100.25) < 0.001
    assert [r[0] for r in s.renewals(101.0)] == ["a"]  # written after 101 only


def test_a_row_this_release_cannot_read_is_skipped_and_old_rows_are_pruned(opener: Callable[[], SqlStore]) -> None:
    s = opener()
    s.put_renewals("a", 100.0, {"n1": 99.0})
    s.put_renewals("b", 200.0, {"n2": 199.0})
    s.put_renewals("c", 200.0, {"n3": 199.0})
    s._exec("UPDATE renewals SET heard = ? WHERE server = ?", ('{"n3": "a newer release\'s"}', "c"))
    assert [r[0] for r in s.renewals(0.0)] == ["a", "b"]
    s.prune(0.0, 150.0)
    assert [r[0] for r in s.renewals(0.0)] == ["b"]
    s.close()
    assert [r[0] for r in opener().renewals(0.0)] == ["b"]  # outlives reopening


@given(at=st.floats(1e9, 4e9), ago=st.floats(0, 3600))
def test_a_time_read_back_is_never_before_the_hearing_and_within_a_millisecond(at: float, ago: float) -> None:
    """A node's time as another server reads it is never earlier than when it was heard: a follower takes the record
    of a node the leader declared lost only if it says the node was heard no earlier than the follower heard it."""
    t = at - ago
    back = renewals_read(at, renewals_body(at, {"n": t}))
    assert back is not None and t <= back["n"] < t + 0.001 + 1e-6


def test_a_row_with_hearings_after_it_was_written_or_out_of_range_is_skipped(opener: Callable[[], SqlStore]) -> None:
    """A broken or hostile row (another release, a bug) neither keeps a node alive past its row's time (a negative
    age: heard an hour from now) nor stops the others' rows being read (an age no float holds)."""
    s = opener()
    s.put_renewals("a", 100.0, {"n1": 99.0})
    s.put_renewals("b", 100.0, {"n2": 99.0})
    s.put_renewals("c", 100.0, {"n3": 99.0})
    s._exec("UPDATE renewals SET heard = ? WHERE server = ?", ('{"n2": -3600000}', "b"))
    s._exec("UPDATE renewals SET heard = ? WHERE server = ?", ('{"n3": 1' + "0" * 400 + "}", "c"))
    rows = {server: heard for server, _, heard in s.renewals(0.0)}
    assert rows.keys() == {"a"}
    assert all(t <= 100.0 for heard in rows.values() for t in heard.values())
