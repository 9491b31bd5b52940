"""A request running longer than settle_after is charged in every window it spans, and its usage row carries the
GPU-seconds it was charged. Before, a window was charged once it had settled, from the usage records that had
landed, and a record lands when its request ends: a stream running past settle_after plus a window was charged 0,
its GPU time went to the replica's other users as idle, and the key's GPU budget never counted it. Now a router
marks a request in flight for long (router/long_marks.py) with its usage batches, and chargeback charges the marks.
The real usage journal, control plane, SQLite store and chargeback, over a fake clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmgw.config.chargeback import ChargebackConfig
from llmgw.control.chargeback.chargeback import Chargeback, _closed
from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.records.state import ReplicaRecord, ShardAssignment
from llmgw.router.long_marks import LongMarks, long_after
from llmgw.router.usage_journal import UNKNOWN, UsageJournal
from llmgw.store.base import IN_FLIGHT, Usage, UsageRecord
from tests.clusters import node
from tests.harness import plane_in

T0 = 1_800_000_000.0  # a multiple of the window and of an hour
CFG = ChargebackConfig(rates={"H100": 36.0}, window=10, settle_after=5)
GPUS = 2


@pytest.fixture
async def plane(tmp_path: Path) -> ControlPlane:
    p = plane_in(tmp_path, FakeClock(T0))
    await p.following.hold_lease()
    p.registry.node_reported(node("n1"))
    p.registry.adopt_replicas([ReplicaRecord(
        id="r1", model="m", created_at=T0, shards_expected=1, ready_at=T0,
        assignments=[ShardAssignment(rank=0, node_id="n1", address="x", gpus=list(range(GPUS)))])])
    return p


def charged(p: ControlPlane) -> dict[str, tuple[float, float, float]]:
    out: dict[str, tuple[float, float, float]] = {}
    for r in p.store.charges_since(0):
        b, lo, i = out.get(r.key_id, (0.0, 0.0, 0.0))
        out[r.key_id] = (b + r.busy_s, lo + r.load_s, i + r.idle_s)
    return out


async def run_for(p: ControlPlane, journal: UsageJournal, acc: Chargeback, seconds: int) -> None:
    clock = p.clock
    assert isinstance(clock, FakeClock)
    for _ in range(seconds):
        clock.advance(1)
        assert await journal.flush()
        await acc.tick()


async def test_a_request_longer_than_settle_after_is_charged_in_every_window(plane: ControlPlane) -> None:
    journal = UsageJournal(plane.activity.record_usage)
    journal.marks = LongMarks(plane.clock.now, long_after(CFG.settle_after))
    acc = Chargeback(CFG, plane.storage, plane.leadership, plane.registry, plane.clock)
    rec = Usage("long-request-1", "A", "m", "", 0, 0, T0, 0.0, UNKNOWN)
    journal.begin(rec)
    rec.replica_id = "r1"  # as the dispatcher sets it when it sends the request there
    await run_for(plane, journal, acc, 60)
    # six windows have settled while it ran: each charged it, none to anyone else
    assert plane.store.charge_mark() == T0 + 50
    assert list(charged(plane)) == ["A"] and charged(plane)["A"] == pytest.approx((GPUS * 50.0, 0.0, 0.0))
    journal.finish(rec, "r1", 20, 400, 70.0, 200)
    await run_for(plane, journal, acc, 40)  # it ends at T0 + 70; its windows settle by T0 + 75
    busy, load, idle = charged(plane)["A"]
    assert busy == pytest.approx(GPUS * 70.0)  # every second it ran, on its two GPUs
    assert load == 0.0 and idle == pytest.approx(GPUS * (plane.store.charge_mark() - T0 - 70.0))
    ((row, gpu_s),) = plane.store.usage_requests(0, T0 + 3600, 10)
    assert (row.id, row.prompt_tokens, row.completion_tokens) == ("long-request-1", 20, 400)
    assert gpu_s == pytest.approx(GPUS * 70.0)  # the request's own row carries what it was charged
    assert plane.store.open_usage(T0 + 3600) == []  # its mark is gone once every window it ran in is charged


async def test_a_mark_no_longer_renewed_stops_being_charged(plane: ControlPlane) -> None:
    """Its router died: the request is charged to when it was last seen, then not at all (the time after is
    the replica's idle time, as for any request that ended)."""
    journal = UsageJournal(plane.activity.record_usage)
    journal.marks = LongMarks(plane.clock.now, long_after(CFG.settle_after))
    acc = Chargeback(CFG, plane.storage, plane.leadership, plane.registry, plane.clock)
    rec = Usage("long-request-2", "A", "m", "r1", 0, 0, T0, 0.0, UNKNOWN)
    journal.begin(rec)
    await run_for(plane, journal, acc, 20)
    seen = max(r.started_at + r.duration_s for r in plane.store.open_usage(T0 + 3600))
    journal.inflight.clear()  # its router is gone: no more marks
    await run_for(plane, journal, acc, 60)
    busy, _, idle = charged(plane)["A"]
    assert busy == pytest.approx(GPUS * (seen - T0))
    assert idle == pytest.approx(GPUS * (plane.store.charge_mark() - seen))
    assert plane.store.open_usage(T0 + 3600) == []


def test_a_mark_is_closed_once_no_later_window_needs_it() -> None:
    """A landed request once it ended by the window's end; one still marked once its last mark is settle_after
    older than the window's end (its router gone)."""
    def rec(status: int, end: float) -> UsageRecord:
        return UsageRecord(id="r" * 8, key_id="A", model="m", replica_id="r1", prompt_tokens=0, completion_tokens=0,
                           started_at=T0, duration_s=end - T0, status=status)

    b = T0 + 100
    assert _closed(rec(200, b), b, 5.0) and not _closed(rec(200, b + 0.5), b, 5.0)
    assert _closed(rec(IN_FLIGHT, b - 5), b, 5.0) and not _closed(rec(IN_FLIGHT, b - 4.5), b, 5.0)
