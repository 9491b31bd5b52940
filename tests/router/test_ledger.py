"""The usage ledger and the store writer under the faults a review found: nothing lost, nothing counted twice."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import threading
from pathlib import Path

from llmgw.control.writer import StoreWriter
from llmgw.core.clock import SystemClock
from llmgw.router.ledger import CHUNK, UNKNOWN, Journal, UsageLedger
from llmgw.store.base import AnyUsage, Usage, new_usage_id


def rec(i: int, status: int = 200) -> Usage:
    return Usage(new_usage_id(), "k", "m", "r", 1, i, float(i), 0.0, status)


def finish(ledger: UsageLedger, r: Usage, status: int = 200) -> None:
    ledger.finish(r, r.replica_id, r.prompt_tokens, r.completion_tokens, r.duration_s, status)


class Store:
    """Records by id, like the real store; can be made to fail."""

    def __init__(self) -> None:
        self.rows: dict[str, AnyUsage] = {}
        self.calls: list[int] = []
        self.failing = False

    async def add(self, batch: list[AnyUsage]) -> None:
        self.calls.append(len(batch))
        if self.failing:
            raise OSError("store unavailable")
        for r in batch:
            self.rows.setdefault(r.id, r)


async def test_a_cancelled_wait_does_not_kill_the_writer() -> None:
    w = StoreWriter(SystemClock())
    gate, started = threading.Event(), threading.Event()

    def busy() -> None:
        started.set()
        gate.wait(5)

    waiter = asyncio.ensure_future(w.run(busy))
    assert await asyncio.to_thread(started.wait, 5)
    queued = asyncio.ensure_future(w.run(lambda: "never wanted"))
    await asyncio.sleep(0)  # the task runs up to its wait: the job is in the writer's queue
    assert w.pending() == 1
    queued.cancel()  # its caller gave up while it waited its turn
    waiter.cancel()
    gate.set()
    assert await w.run(lambda: 42) == 42, "the writer thread died"
    w.close()


async def test_a_backlog_beyond_memory_is_read_back_from_the_journal_once_it_drains(tmp_path: Path) -> None:
    store = Store()
    ledger = UsageLedger(store.add, tmp_path, max_pending=3)
    store.failing = True
    for i in range(10):
        r = rec(i, UNKNOWN)
        ledger.begin(r)
        finish(ledger, r)
        await ledger.flush()
    assert ledger.evicted == 7 and ledger.unflushed == 10
    store.failing = False
    assert await ledger.flush()
    assert len(store.rows) == 10 and ledger.unflushed == 0 and ledger.evicted == 0
    assert sorted(p.name for p in tmp_path.glob("*.jsonl")) == [ledger.journal.path.name]  # type: ignore[union-attr]


async def test_big_batches_go_in_chunks(tmp_path: Path) -> None:
    store = Store()
    ledger = UsageLedger(store.add, tmp_path)
    for i in range(2 * CHUNK + 7):
        finish(ledger, rec(i))
    assert await ledger.flush()
    assert store.calls == [CHUNK, CHUNK, 7] and len(store.rows) == 2 * CHUNK + 7


async def test_a_dead_writers_journal_is_recorded_whatever_its_pid_and_a_live_ones_is_not(tmp_path: Path) -> None:
    store = Store()
    dead = Journal(tmp_path)
    done, cut = rec(1, UNKNOWN), rec(2, UNKNOWN)
    dead.append(done)
    dead.append(dataclasses.replace(done, status=200))
    dead.append(cut)  # in flight when it died
    os.close(dead._lock)  # its process is gone: the lock is free (the pid in nobody's way)
    live = Journal(tmp_path)
    live.append(rec(3))
    ledger = UsageLedger(store.add, tmp_path, adopt=True)
    assert ledger.adopt_orphans() == 2
    assert await ledger.flush()
    assert sorted((r.completion_tokens, r.status) for r in store.rows.values()) == [(1, 200), (2, UNKNOWN)]
    assert not list(tmp_path.glob(f"{dead.token}*")) and (tmp_path / f"{live.token}.lock").exists()
    assert ledger.adopt_orphans() == 0  # once


async def test_a_batch_waiting_on_a_slow_store_still_counts_as_unflushed(tmp_path: Path) -> None:
    """Found by a flaky test: while a batch waited on a locked store, the gauge said nothing was waiting."""
    gate, entered = asyncio.Event(), asyncio.Event()

    async def slow(batch: list[AnyUsage]) -> None:
        entered.set()
        await gate.wait()

    ledger = UsageLedger(slow, tmp_path)
    for i in range(3):
        finish(ledger, rec(i))
    flushing = asyncio.ensure_future(ledger.flush())
    await asyncio.wait_for(entered.wait(), 5)
    assert ledger.unflushed == 3
    gate.set()
    assert await flushing and ledger.unflushed == 0
