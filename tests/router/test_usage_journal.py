"""The usage journal and the store writer under the faults a review found: nothing lost, nothing counted twice."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from llmgw.control.storage.writer import StoreWriter
from llmgw.core.clock import SystemClock
from llmgw.router.usage_journal import CHUNK, MAP_SAFE, UNKNOWN, Journal, UsageJournal, fs_type
from llmgw.store.base import AnyUsage, Usage, new_usage_id


def rec(i: int, status: int = 200) -> Usage:
    return Usage(new_usage_id(), "k", "m", "r", 1, i, float(i), 0.0, status)


def finish(usage_journal: UsageJournal, r: Usage, status: int = 200) -> None:
    usage_journal.finish(r, r.replica_id, r.prompt_tokens, r.completion_tokens, r.duration_s, status)


async def served(usage_journal: UsageJournal, n: int, flush_each: bool = False) -> list[Usage]:
    """n requests begun and ended (flushed after each, if asked): their records."""
    recs = []
    for i in range(n):
        r = rec(i, UNKNOWN)
        usage_journal.begin(r)
        finish(usage_journal, r)
        recs.append(r)
        if flush_each:
            await usage_journal.flush()
    return recs


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
    usage_journal = UsageJournal(store.add, tmp_path, max_pending=3)
    store.failing = True
    await served(usage_journal, 10, flush_each=True)
    assert usage_journal.evicted == 7 and usage_journal.unflushed == 10
    store.failing = False
    assert await usage_journal.flush()
    assert len(store.rows) == 10 and usage_journal.unflushed == 0 and usage_journal.evicted == 0
    left = sorted(p.name for p in tmp_path.glob("*.jsonl"))
    assert left in ([], [usage_journal.journal.path.name])  # type: ignore[union-attr]  # at most the one being written


async def test_big_batches_go_in_chunks(tmp_path: Path) -> None:
    store = Store()
    usage_journal = UsageJournal(store.add, tmp_path)
    for i in range(2 * CHUNK + 7):
        finish(usage_journal, rec(i))
    assert await usage_journal.flush()
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
    usage_journal = UsageJournal(store.add, tmp_path, adopt=True)
    assert usage_journal.adopt_orphans() == 2
    assert await usage_journal.flush()
    assert sorted((r.completion_tokens, r.status) for r in store.rows.values()) == [(1, 200), (2, UNKNOWN)]
    assert not list(tmp_path.glob(f"{dead.token}*")) and (tmp_path / f"{live.token}.lock").exists()
    assert usage_journal.adopt_orphans() == 0  # once


async def test_budgets_are_read_again_once_what_a_dead_writer_left_has_landed(tmp_path: Path) -> None:
    """Not before (the store does not hold it yet: a store failing at first delays it), and only then."""
    store = Store()
    dead = Journal(tmp_path)
    dead.append(rec(1))
    os.close(dead._lock)
    usage_journal = UsageJournal(store.add, tmp_path, adopt=True)
    seen: list[int] = []

    async def reseed() -> None:
        seen.append(len(store.rows))

    usage_journal.on_replayed = reseed
    await usage_journal.flush()
    assert seen == []  # nothing adopted yet
    assert usage_journal.adopt_orphans() == 1
    store.failing = True
    assert not await usage_journal.flush()
    assert seen == []
    store.failing = False
    assert await usage_journal.flush()
    assert seen == [1]
    await served(usage_journal, 2, flush_each=True)
    assert seen == [1]  # its own records are settled as they end: no reading again


async def test_a_batch_waiting_on_a_slow_store_still_counts_as_unflushed(tmp_path: Path) -> None:
    """Found by a flaky test: while a batch waited on a locked store, the gauge said nothing was waiting."""
    gate, entered = asyncio.Event(), asyncio.Event()

    async def slow(batch: list[AnyUsage]) -> None:
        entered.set()
        await gate.wait()

    usage_journal = UsageJournal(slow, tmp_path)
    for i in range(3):
        finish(usage_journal, rec(i))
    flushing = asyncio.ensure_future(usage_journal.flush())
    await asyncio.wait_for(entered.wait(), 5)
    assert usage_journal.unflushed == 3
    gate.set()
    assert await flushing and usage_journal.unflushed == 0


class SlowStore(Store):
    """A store whose add yields once and then runs `during` (what the router does while the batch is on its way)."""

    def __init__(self) -> None:
        super().__init__()
        self.during: list[Callable[[], None]] = []

    async def add(self, batch: list[AnyUsage]) -> None:
        await super().add(batch)
        await asyncio.sleep(0)
        while self.during:
            self.during.pop(0)()


async def test_a_read_back_backlog_keeps_what_ended_while_it_was_sent(tmp_path: Path) -> None:
    """Found in review: once the backlog drained, the records read back from the journal replaced what had ended
    while the batch was on its way (never recorded), and a request in flight at the rotation that ended meanwhile
    was read back from its begin line alone: recorded as "outcome unknown" with no tokens, for good."""
    store = SlowStore()
    usage_journal = UsageJournal(store.add, tmp_path, max_pending=2)
    store.failing = True
    await served(usage_journal, 4)
    assert usage_journal.evicted == 2 and not await usage_journal.flush()
    store.failing = False
    x, late = rec(100, UNKNOWN), rec(200, UNKNOWN)
    usage_journal.begin(x)  # in flight when the next flush rotates

    def meanwhile() -> None:
        finish(usage_journal, x)
        usage_journal.begin(late)
        finish(usage_journal, late)

    store.during.append(meanwhile)
    for _ in range(3):
        assert await usage_journal.flush()
    await usage_journal.close()
    assert late.id in store.rows
    assert store.rows[x.id].status == 200
    assert len(store.rows) == 6 and usage_journal.unflushed == 0


async def test_a_rotation_on_a_full_disk_still_accounts_for_the_old_segment(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Found in review: carrying the requests in flight into the new segment failed on a full disk, rotate raised,
    and the sealed old segment was in no list: the records evicted into it were never read back."""
    store = Store()
    usage_journal = UsageJournal(store.add, tmp_path, max_pending=2)
    recs = await served(usage_journal, 5)
    assert usage_journal.evicted == 3
    inflight = rec(99, UNKNOWN)
    usage_journal.begin(inflight)

    def full(*_: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:  # the disk fills up: no room to reserve, no line written
        m.setattr(os, "posix_fallocate", full)
        m.setattr(os, "pwrite", full)
        assert await usage_journal.flush()
    finish(usage_journal, inflight)
    assert await usage_journal.flush()
    await usage_journal.close()
    assert {r.id for r in recs} | {inflight.id} == set(store.rows)
    assert store.rows[inflight.id].status == 200
    assert not list(tmp_path.glob("*.jsonl"))


async def test_a_segment_that_cannot_be_opened_once_is_opened_with_the_next_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found in review: one failed open at a rotation (too many open files) ended the journal for the life of the
    process (every later line failed on a closed descriptor): a crash then lost the usage."""
    usage_journal = UsageJournal(Store().add, tmp_path)
    first = rec(0)
    usage_journal.begin(first)
    finish(usage_journal, first)
    real_open = os.open
    refused: list[str] = []

    def once(path: str, flags: int, mode: int = 0o777) -> int:
        if str(path).endswith("-2.jsonl") and not refused:
            refused.append(str(path))
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(path, flags, mode)

    later = rec(1)
    with monkeypatch.context() as m:
        m.setattr(os, "open", once)
        assert await usage_journal.flush()
        usage_journal.begin(rec(2))  # the open refused: this line is lost, and said
    assert refused
    usage_journal.begin(later)  # the next line opens the segment
    assert await usage_journal.flush()
    journaled = b"".join(p.read_bytes() for p in tmp_path.glob("*.jsonl"))
    assert later.id.encode() in journaled
    await usage_journal.close()


def test_lines_are_mapped_only_on_file_systems_that_keep_a_reservation(tmp_path: Path) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text("/dev/vda / ext4 rw 0 0\n/dev/sdb /data btrfs rw 0 0\ntmpfs /data/fast\\040dir tmpfs rw 0 0\n"
                      "server:/x /data/nfs nfs4 rw 0 0\n")
    assert fs_type(Path("/var/lib/llmgw"), mounts) == "ext4"
    assert fs_type(Path("/data/journal"), mounts) == "btrfs"
    assert fs_type(Path("/data/fast dir/j"), mounts) == "tmpfs"
    assert fs_type(Path("/data/nfs"), mounts) == "nfs4"
    assert {k for k in ("ext4", "btrfs", "tmpfs", "nfs4", "zfs") if k in MAP_SAFE} == {"ext4", "tmpfs"}
    j = Journal(tmp_path / "j")
    j.mapped = False  # as on btrfs, ZFS or NFS: no map, one pwrite() per line, no reserved zeros
    lines = [rec(i) for i in range(3)]
    for r in lines:
        j.append(r)
    assert j.path.read_bytes() == b"".join(r.json_line() for r in lines)
    j.close(keep=False)
