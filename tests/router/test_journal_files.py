"""The usage journal's files and the usage journal's background flush, held directly: who may read the files, what a
close leaves, which dead writers' segments are claimed and read, how a file system is told, and that the flush
loop sends, retries and adopts on its own. The rules a mutation-testing run found unguarded."""

from __future__ import annotations

import asyncio
import shutil
import stat
from pathlib import Path

import pytest

from llmgw.router.usage_journal import (
    ADOPT_EVERY,
    CHUNK,
    UNKNOWN,
    UNSENT,
    Journal,
    UsageJournal,
    claim_orphans,
    fs_type,
    read_segments,
)
from llmgw.store.base import AnyUsage, Usage, new_usage_id
from tests.harness import await_until


def usage(i: int, status: int = 200) -> Usage:
    return Usage(new_usage_id(), "k", "m", "r", 1, i, float(i), 0.0, status)


def dead_writer(directory: Path, *recs: Usage) -> list[Path]:
    """Segments a writer left when it died (its lock file is there, and nobody holds it)."""
    j = Journal(directory)
    for r in recs:
        j.append(r)
    j.close(keep=True)
    return sorted(directory.glob(f"{j.token}-*.jsonl"))


def test_the_journals_files_are_readable_by_their_owner_only(tmp_path: Path) -> None:
    j = Journal(tmp_path / "journal" / "nested")  # made, parents and all
    j.append(usage(1))
    for f in (j.path, j.lock_path):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    j.close(keep=False)


def test_a_close_keeps_segment_and_lock_only_when_asked(tmp_path: Path) -> None:
    kept, gone = Journal(tmp_path / "a"), Journal(tmp_path / "b")
    for j in (kept, gone):
        j.append(usage(1))
    kept.close(keep=True)
    gone.close(keep=False)
    assert kept.path.exists() and kept.lock_path.exists()
    assert not gone.path.exists() and not gone.lock_path.exists()


def test_a_rotation_with_nothing_written_since_the_last_is_none(tmp_path: Path) -> None:
    j = Journal(tmp_path)
    j.append(usage(1))
    first = j.rotate([])
    assert first is not None and first.exists()
    assert j.rotate([]) is None
    j.close(keep=False)


def test_every_dead_writers_segments_are_claimed_and_read_past_a_bad_line_or_a_missing_file(tmp_path: Path) -> None:
    a, b = usage(1), usage(2)
    segments = dead_writer(tmp_path, a) + dead_writer(tmp_path, b)
    alive = Journal(tmp_path)
    alive.append(usage(3))
    claimed, held = claim_orphans(tmp_path, alive.token)
    assert sorted(claimed) == sorted(segments) and len(held) == 2
    with segments[0].open("r+b") as f:  # a line nobody can read, then one that must still count
        good = f.read()
        f.seek(0)
        f.write(b'{"not a record"}\n' + good)
    records = read_segments([tmp_path / "gone.jsonl", *segments])
    assert sorted(r.id for r in records) == sorted([a.id, b.id])
    alive.close(keep=False)


def test_the_file_system_is_the_innermost_mount_and_the_last_mounted_at_a_point(tmp_path: Path) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text("\n".join([
        "rootfs / ext4 rw 0 0",
        "short line",
        "d /data xfs rw 0 0",
        "d /data tmpfs rw 0 0",  # mounted over the one before
        "d /data/deep\\040dir btrfs rw 0 0",
        "d /dat ext2",  # three fields are enough; /dat is no prefix of /data
    ]))
    data = tmp_path / "data"
    assert fs_type(Path("/data/x"), mounts) == "tmpfs"
    assert fs_type(Path("/data/deep dir/x"), mounts) == "btrfs"
    assert fs_type(Path("/dat/x"), mounts) == "ext2"
    assert fs_type(Path("/elsewhere"), mounts) == "ext4"
    assert fs_type(data, tmp_path / "none") == ""
    empty = tmp_path / "empty"
    empty.write_text("")
    assert fs_type(data, empty) == ""


async def test_the_background_flush_sends_retries_with_backoff_and_adopts_dead_writers(tmp_path: Path) -> None:
    landed: dict[str, AnyUsage] = {}
    failures_left = 2

    async def sink(batch: list[AnyUsage]) -> None:
        nonlocal failures_left
        if failures_left:
            failures_left -= 1
            raise OSError("store unavailable")
        landed.update((r.id, r) for r in batch)

    usage_journal = UsageJournal(sink, tmp_path, adopt=True)
    r = usage(1, UNKNOWN)
    usage_journal.begin(r)
    usage_journal.finish(r, "r", 1, 2, 0.1, 200)
    task = asyncio.create_task(usage_journal.run(0.001))
    try:
        await await_until(lambda: r.id in landed or task.done(), 10, "the record flushed after two failures")
        assert not task.done(), task
        orphan = usage(2)
        dead_writer(tmp_path, orphan)  # a worker that died after the server started: found within 30 flushes
        await await_until(lambda: orphan.id in landed or task.done(), 10, "the dead writer's record adopted")
        assert not task.done(), task
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await usage_journal.close()


async def test_a_worker_never_adopts_what_dead_writers_left(tmp_path: Path) -> None:
    """Only the server adopts (its workers would race it for the same segments)."""
    landed: list[AnyUsage] = []

    async def sink(batch: list[AnyUsage]) -> None:
        landed.extend(batch)

    orphan = usage(1)
    dead_writer(tmp_path, orphan)
    usage_journal = UsageJournal(sink, tmp_path, adopt=False)
    assert UsageJournal(sink, None).adopt_orphans() == 0  # no journal: nothing to adopt
    task = asyncio.create_task(usage_journal.run(0.0005))
    try:
        await await_until(lambda: usage_journal._flushes > 2 * ADOPT_EVERY or task.done(), 10, "60 flushes")
        assert not task.done() and landed == []
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await usage_journal.close()


def test_a_request_that_reached_no_engine_leaves_nothing_to_record(tmp_path: Path) -> None:
    async def sink(batch: list[AnyUsage]) -> None:
        raise AssertionError("nothing to send")

    usage_journal = UsageJournal(sink, tmp_path)
    r = usage(1, UNKNOWN)
    usage_journal.begin(r)
    usage_journal.unsent(r)
    assert usage_journal.inflight == {} and usage_journal.pending == [] and r.status == UNSENT
    assert usage_journal.journal is not None and read_segments([usage_journal.journal.path]) == []


def test_a_backlog_over_its_bound_leaves_the_oldest_to_the_journal_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def sink(batch: list[AnyUsage]) -> None:
        return None

    usage_journal = UsageJournal(sink, tmp_path, max_pending=2)
    recs = [usage(i, UNKNOWN) for i in range(5)]

    def said() -> list[str]:
        return [m for m in caplog.messages if "usage backlog over" in m]

    for r in recs[:2]:
        usage_journal.begin(r)
        usage_journal.finish(r, "r", 1, 1, 0.1, 200)
    assert usage_journal.evicted == 0 and len(usage_journal.pending) == 2 and said() == []  # at the bound, not over it
    for i, r in enumerate(recs[2:]):
        usage_journal.begin(r)
        usage_journal.finish(r, "r", 1, 1, 0.1, 200)
        assert usage_journal.evicted == i + 1  # said at the first record pushed out, and only then
        assert said() == ["usage backlog over 2 records: the oldest wait in the journal until it drains"]
    assert [p.id for p in usage_journal.pending] == [r.id for r in recs[3:]]


async def test_a_usage_journal_closing_with_usage_not_landed_keeps_its_file_for_the_next_process(
        tmp_path: Path) -> None:
    async def down(batch: list[AnyUsage]) -> None:
        raise OSError("store unavailable")

    async def up(batch: list[AnyUsage]) -> None:
        return None

    for sink, kept in ((down, True), (up, False)):
        directory = tmp_path / str(kept)
        usage_journal = UsageJournal(sink, directory)
        r = usage(1, UNKNOWN)
        usage_journal.begin(r)
        usage_journal.finish(r, "r", 1, 1, 0.1, 200)
        await usage_journal.close()
        assert bool(list(directory.glob("*.jsonl"))) == kept and bool(list(directory.glob("*.lock"))) == kept


async def test_what_two_adoptions_held_is_all_let_go_once_it_landed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def sink(batch: list[AnyUsage]) -> None:
        return None

    usage_journal = UsageJournal(sink, tmp_path, adopt=True)
    assert usage_journal.journal is not None
    for i in range(2):  # two workers dead at different times, adopted one by one
        dead_writer(tmp_path, usage(i))
        assert usage_journal.adopt_orphans() == 1
    assert caplog.messages.count(
        "recording 1 request(s) left in the usage journal by a process that stopped") == 2
    assert await usage_journal.flush()
    assert [p.name for p in tmp_path.glob("*.lock")] == [usage_journal.journal.lock_path.name]
    assert usage_journal.orphan_locks == []
    await usage_journal.close()


def test_a_journal_that_cannot_be_written_is_said_once_per_outage_and_loses_nothing_in_memory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def sink(batch: list[AnyUsage]) -> None:
        return None

    directory = tmp_path / "journal"
    usage_journal = UsageJournal(sink, directory)
    shutil.rmtree(directory)  # its first segment cannot be made
    first, second = usage(1, UNKNOWN), usage(2, UNKNOWN)
    usage_journal.begin(first)
    usage_journal.begin(second)
    directory.mkdir()
    third = usage(3, UNKNOWN)
    usage_journal.begin(third)  # written: the outage is over
    assert set(usage_journal.inflight) == {first.id, second.id, third.id}
    shutil.rmtree(directory)
    assert usage_journal.journal is not None
    usage_journal.journal.rotate([])  # a new segment, in a directory gone again
    usage_journal.begin(usage(4, UNKNOWN))
    said = [m for m in caplog.messages if "usage journal cannot be written" in m]
    assert len(said) == 2 and all("a crash now would lose in-flight usage" in m and "No such file" in m
                                  for m in said), said


async def test_a_flush_cancelled_mid_send_keeps_the_batch_and_counts_it_unflushed(tmp_path: Path) -> None:
    gate = asyncio.Event()

    async def stuck(batch: list[AnyUsage]) -> None:
        await gate.wait()

    usage_journal = UsageJournal(stuck, tmp_path)
    r = usage(1, UNKNOWN)
    usage_journal.begin(r)
    usage_journal.finish(r, "r", 1, 1, 0.1, 200)
    flushing = asyncio.create_task(usage_journal.flush())
    await await_until(lambda: usage_journal._sending == 1, 5, "the batch handed to the store")
    flushing.cancel()
    await asyncio.gather(flushing, return_exceptions=True)
    assert [p.id for p in usage_journal.pending] == [r.id]
    assert usage_journal._sending == 0 and usage_journal.unflushed == 1


async def test_a_batch_of_several_chunks_leaves_nothing_counted_unflushed(tmp_path: Path) -> None:
    sizes: list[int] = []

    async def sink(batch: list[AnyUsage]) -> None:
        sizes.append(len(batch))

    usage_journal = UsageJournal(sink, None)
    for i in range(CHUNK * 2 + 7):
        r = usage(i, UNKNOWN)
        usage_journal.begin(r)
        usage_journal.finish(r, "r", 1, 1, 0.1, 200)
    assert await usage_journal.flush()
    assert sizes == [CHUNK, CHUNK, 7] and usage_journal.unflushed == 0


async def test_each_outage_is_said_once_and_its_end_names_the_attempts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    down = True

    async def sink(batch: list[AnyUsage]) -> None:
        if down:
            raise OSError("store unavailable")

    usage_journal = UsageJournal(sink, tmp_path)
    for outage in (2, 3):
        down = True
        for _ in range(outage):
            r = usage(outage, UNKNOWN)
            usage_journal.begin(r)
            usage_journal.finish(r, "r", 1, 1, 0.1, 200)
            assert not await usage_journal.flush()
        down = False
        assert await usage_journal.flush() and await usage_journal.flush()
    errors = [m for m in caplog.messages if m.startswith("usage not recorded yet")]
    again = [m for m in caplog.messages if m.startswith("usage recorded again")]
    assert len(errors) == 2, errors
    assert again == ["usage recorded again after 2 failed attempt(s)", "usage recorded again after 3 failed attempt(s)"]
    await usage_journal.close()


async def test_a_backlog_read_back_that_cannot_be_sent_keeps_its_segments(tmp_path: Path) -> None:
    calls = 0

    async def sink(batch: list[AnyUsage]) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:  # the backlog read back from the journal
            raise OSError("store unavailable")

    usage_journal = UsageJournal(sink, tmp_path, max_pending=1)
    for i in range(3):
        r = usage(i, UNKNOWN)
        usage_journal.begin(r)
        usage_journal.finish(r, "r", 1, 1, 0.1, 200)
    assert usage_journal.evicted == 2
    assert not await usage_journal.flush()
    assert usage_journal.segments and all(p.exists() for p in usage_journal.segments)
    await usage_journal.close()


async def test_a_usage_journal_closing_with_a_request_in_flight_keeps_its_journal(tmp_path: Path) -> None:
    async def sink(batch: list[AnyUsage]) -> None:
        return None

    usage_journal = UsageJournal(sink, tmp_path)
    usage_journal.begin(usage(1, UNKNOWN))  # never finished: its begin line is all there is
    await usage_journal.close()
    assert list(tmp_path.glob("*.jsonl")) and list(tmp_path.glob("*.lock"))
