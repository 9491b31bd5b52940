"""An on-demand load (or wake) is charged to the keys whose requests waited for it, one share per waiting request,
whoever was served first: each instant of the load is shared by the requests that had asked for it by then.
Before, it went to the first request the new replica served: a key that asked for a model and left after 0.3 s
paid nothing, and the next key paid the whole load and the idle time after (replayed: 51 GPU-seconds for one
0.03 s request). The pure model first; then the marks' way through the usage journal, the store and the leader's
chargeback."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmgw.chargeback import charge_window
from llmgw.config.chargeback import ChargebackConfig
from llmgw.control.chargeback.chargeback import Chargeback
from llmgw.core.clock import FakeClock
from llmgw.records.chargeback import OPERATOR
from llmgw.records.state import ReplicaRecord, ShardAssignment
from llmgw.router.long_marks import LongMarks
from llmgw.router.usage_journal import UsageJournal
from llmgw.store.base import UsageRecord
from tests.chargeback.test_gpu_time_attribution import CONFIG, by_key, req, span
from tests.clusters import node
from tests.harness import plane_in


def wait(key: str, start: float, dur: float, n: int = 0) -> UsageRecord:
    """A request's wait for model m, as its router marks it (no replica: a wait)."""
    return UsageRecord(id=f"wait-{key}-{start:08.3f}-{n}", key_id=key, model="m", replica_id="", prompt_tokens=0,
                       completion_tokens=0, started_at=start, duration_s=dur, status=102)


def test_a_key_that_asks_and_leaves_pays_for_the_load_it_asked_for() -> None:
    # A asks at 0 (the replica is placed at 0.1) and leaves after 0.3 s; B arrives at 40, waits, is served at 50:
    # the load is A's alone until B asks, then theirs by halves; each pays less than it would alone (49.9)
    acc = charge_window(0, 60, [span(created=0.1, ready=50.0)], [req("B", 50.0, 0.03)], CONFIG,
                        [wait("A", 0.0, 0.4), wait("B", 40.0, 10.0)])
    charged = by_key(acc)
    assert charged["A"][1] == pytest.approx(39.9 + 5.0) and charged["B"][1] == pytest.approx(5.0)
    assert sum(sum(v) for v in charged.values()) == pytest.approx(59.9)  # conservation: every second, once


def test_where_windows_fall_changes_no_ones_load() -> None:
    waits = [wait("A", 0.0, 0.4), wait("B", 13.0, 37.0), wait("C", 27.5, 1.0)]
    whole = by_key(charge_window(0, 60, [span(created=0.1, ready=50.0)], [], CONFIG, waits))
    spans, load = [span(created=0.1, ready=50.0)], {"A": 0.0, "B": 0.0, "C": 0.0}
    for a in range(0, 60, 10):
        acc = charge_window(a, a + 10, spans, [], CONFIG, waits)
        spans = acc.spans
        for key, (_, lo, _) in by_key(acc).items():
            load[key] += lo
    assert load == pytest.approx({k: v[1] for k, v in whole.items()})
    assert load == pytest.approx({"A": 12.9 + 14.5 / 2 + 22.5 / 3, "B": 14.5 / 2 + 22.5 / 3, "C": 22.5 / 3})


def test_shares_count_requests_and_a_wait_before_the_residency_or_after_the_load_asks_nothing() -> None:
    waits = [wait("A", 5.0, 50.0, n) for n in range(3)] + [
        wait("B", 20.0, 35.0),
        wait("C", 0.0, 9.0),  # gave up before the replica was placed: it waited for an earlier try, not this one
        wait("D", 60.0, 1.0),  # began after the load ended (the replica was ready: it was no waiting for a load)
    ]
    acc = charge_window(0, 70, [span(created=10.0, ready=55.0)], [req("A", 55.0, 1.0)], CONFIG, waits)
    charged = by_key(acc)
    assert charged["A"][1] == pytest.approx(10.0 + 35.0 * 3 / 4) and charged["B"][1] == pytest.approx(35.0 / 4)
    assert "C" not in charged and "D" not in charged


def test_a_load_longer_than_a_window_goes_to_its_askers_in_every_window() -> None:
    first = charge_window(0, 10, [span(ready=25.0)], [], CONFIG, [wait("A", 0.0, 1.0)])
    assert by_key(first) == {"A": (0.0, 10.0, 0.0)}
    second = charge_window(10, 20, first.spans, [], CONFIG, [wait("B", 12.0, 13.0)])
    assert by_key(second) == {"A": (0.0, 6.0, 0.0), "B": (0.0, 4.0, 0.0)}


def test_without_waits_the_first_request_served_still_pays_and_an_operators_load_stays_the_operators() -> None:
    acc = charge_window(0, 60, [span(ready=50.0)], [req("B", 50.0, 0.03)], CONFIG)
    assert by_key(acc)["B"][1] == pytest.approx(50.0)
    kept = charge_window(0, 60, [span(ready=50.0, demand=False)], [], CONFIG, [wait("A", 0.0, 60.0)])
    assert set(by_key(kept)) == {OPERATOR}


def test_a_scale_up_is_charged_to_the_requests_it_was_placed_for_not_to_the_first_to_reach_it() -> None:
    """r1 serves B's two long requests; the reconciler places r2 at 10 for them (it is ready at 40); X's request is
    the first to reach r2. Before, X paid r2's whole load (30 GPU-seconds) for racing to it."""
    r1, r2 = span(id="r1"), span(id="r2", created=10.0, ready=40.0)
    reqs = [req("B", 0.0, 100.0, replica="r1", id="b" * 8), req("B", 5.0, 100.0, replica="r1", id="c" * 8),
            req("C", 9.0, 0.5, replica="r1", id="d" * 8), req("X", 40.0, 1.0, replica="r2", id="x" * 8)]
    acc = charge_window(0, 60, [r1, r2], reqs, CONFIG)
    load = {k: v[1] for k, v in by_key(acc).items() if v[1]}
    assert load == {"B": pytest.approx(30.0)}  # C's request ended before the placement: it asked for nothing
    # split over windows, the same
    spans, total = [r1, r2], dict[str, float]()
    for a in range(0, 60, 10):
        step = charge_window(a, a + 10, spans, [r for r in reqs if r.started_at < a + 10 and
                                                 r.started_at + r.duration_s >= a], CONFIG)
        spans = step.spans
        for k, v in by_key(step).items():
            total[k] = total.get(k, 0.0) + v[1]
    assert {k: v for k, v in total.items() if v} == {"B": pytest.approx(30.0)}


CFG = ChargebackConfig(rates={"H100": 36.0}, window=10, settle_after=5)
T0 = 1_800_000_000.0


async def test_a_load_is_charged_to_the_keys_that_asked_for_it_end_to_end(tmp_path: Path) -> None:
    """The waits marked by the usage journal as the router hands them over, through the real store, charged by the
    leader's chargeback."""
    clock = FakeClock(T0)
    plane = plane_in(tmp_path, clock)
    await plane.following.hold_lease()
    plane.registry.node_reported(node("n1"))
    plane.registry.adopt_replicas([ReplicaRecord(
        id="r1", model="m", created_at=T0, shards_expected=1, ready_at=T0 + 30,
        assignments=[ShardAssignment(rank=0, node_id="n1", address="x", gpus=[0])])])
    journal = UsageJournal(plane.activity.record_usage)
    marks = journal.marks = LongMarks(clock.now, 1.0)
    acc = Chargeback(CFG, plane.storage, plane.leadership, plane.registry, clock)
    journal.pending.append(marks.waited("A", "m", T0, 0.3))  # as ReadyWait.on_waited does in the router
    clock.advance(31)
    journal.pending.append(marks.waited("B", "m", T0 + 20, 10.0))
    plane.store.add_usage([UsageRecord(key_id="B", model="m", replica_id="r1", prompt_tokens=1, completion_tokens=1,
                                       started_at=T0 + 30, duration_s=0.03, status=200)])
    assert await journal.flush()
    clock.advance(20)
    while await acc.tick():
        pass
    load = {r.key_id: r.load_s for r in plane.store.charges_since(0) if r.load_s}
    assert load == {"A": pytest.approx(25.0), "B": pytest.approx(5.0)}  # A's alone for 20 s, then halves
    assert plane.store.charge_mark() == T0 + 40
    assert plane.store.open_usage(T0 + 3600) == []  # the waits are closed once their windows are charged
