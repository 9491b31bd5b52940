"""Chargeback's read of usage rows (usage_started) takes a row an older release wrote without an id, and leaves
out one whose times no request can have (a negative duration, written before usage times were bounded), instead of
failing the read: one such row in a window would stop every window's charging for good."""

from __future__ import annotations

from collections.abc import Callable

from llmgw.store.base import UsageRecord
from llmgw.store.sql import SqlStore

INSERT = ("INSERT INTO usage (id, key_id, model, replica_id, prompt_tokens, completion_tokens, started_at,"
          " duration_s, status) VALUES (?, ?, 'm', 'r1', 1, 1, ?, ?, 200)")


def test_rows_without_an_id_are_read_and_impossible_ones_left_out(opener: Callable[[], SqlStore]) -> None:
    s = opener()
    s.add_usage([UsageRecord(key_id="A", model="m", replica_id="r1", prompt_tokens=1, completion_tokens=1,
                             started_at=100.0, duration_s=2.0, status=200)])
    s._exec(INSERT, (None, "B", 101.0, 3.0))  # before usage rows had ids
    s._exec(INSERT, (None, "C", 102.0, -5.0))  # before usage times were bounded
    s._exec(INSERT, (None, "D", 103.0, 4.0))
    got = s.usage_started(0.0, 200.0)
    assert [(u.key_id, u.started_at, u.duration_s) for u in got] == [("A", 100.0, 2.0), ("B", 101.0, 3.0),
                                                                       ("D", 103.0, 4.0)]
    assert len({u.id for u in got}) == 3, "each row keeps an id of its own"
