"""The marks a router sends chargeback (router/long_marks.py): a request sent to a replica is marked once it has run
long_after, again each half of that while it runs, with no tokens and how long it has run; one not sent anywhere
or not yet long is not; a finished one is forgotten. A wait for a model is marked with how long it waited.
long_after is a third of settle_after, between 1 s and 2 minutes."""

from __future__ import annotations

import pytest

from llmgw.core.clock import FakeClock
from llmgw.router.long_marks import LongMarks, long_after
from llmgw.store.base import IN_FLIGHT, Usage

T0 = 1_800_000_000.0


def test_long_after_is_a_third_of_settle_after_within_bounds() -> None:
    assert [long_after(s) for s in (0.0, 3.0, 30.0, 360.0, 900.0, 86400.0)] == [1.0, 1.0, 10.0, 120.0, 120.0, 120.0]


def test_a_request_is_marked_once_long_then_each_half_of_long_after() -> None:
    clock = FakeClock(T0)
    marks = LongMarks(clock.now, 10.0)
    sent = Usage("r1", "k", "m", "rep", 0, 0, T0, 0.0, 0)
    unsent = Usage("r2", "k", "m", "", 0, 0, T0, 0.0, 0)
    clock.advance(9.99)
    assert marks.due([sent, unsent]) == []  # not long yet
    clock.advance(0.01)
    (mark,) = marks.due([sent, unsent])  # long from exactly long_after; the one not sent anywhere never
    assert (mark.id, mark.replica_id, mark.prompt_tokens, mark.completion_tokens, mark.status) == \
        ("r1", "rep", 0, 0, IN_FLIGHT)
    assert mark.started_at == T0 and mark.duration_s == pytest.approx(10.0)
    clock.advance(4.99)
    assert marks.due([sent]) == []
    clock.advance(0.01)
    (again,) = marks.due([sent])  # each half of long_after
    assert again.duration_s == pytest.approx(15.0)
    assert marks.due([sent]) == []
    marks.forget("r1")
    marks.forget("never-marked")  # every finished request is forgotten, marked or not
    assert marks.due([]) == [] and not marks._marked  # a finished request is not kept


def test_a_wait_is_marked_with_how_long_it_waited() -> None:
    marks = LongMarks(FakeClock(T0).now, 10.0)
    w = marks.waited("k", "m", T0, 0.3)
    assert (w.key_id, w.model, w.replica_id, w.prompt_tokens, w.completion_tokens, w.status) == \
        ("k", "m", "", 0, 0, IN_FLIGHT)
    assert (w.started_at, w.duration_s) == (T0, 0.3)
    assert marks.waited("k", "m", T0, -1.0).duration_s == 0.0
