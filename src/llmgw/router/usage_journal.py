"""Usage on its way to the store: journaled before the answer ends, flushed in batches, retried, never lost.

Usage is what operators bill from, so a request that reached an engine is recorded exactly once, whatever the
client, the store or this process does:
- `begin` appends the request to a journal file the moment it is sent to an engine, `finish` appends its outcome
  before the last byte of the answer goes out. Lines are copied into a shared memory map of the segment, whose
  blocks are reserved first (posix_fallocate: a store into the map never meets a full disk): the page cache has
  every line the moment it is copied, so a killed process loses nothing the kernel has (a crashed machine can
  lose the last moments of its page cache), and a request costs no system call for its two lines. On a file
  system where a reservation does not hold (copy-on-write, network; see MAP_SAFE), or where space cannot be
  reserved, lines go out with one `pwrite()` each. A Journal is its process's: not to be used across a fork.
  Each process's segments carry a random token and it holds an flock on `<token>.lock` while it lives: a process
  finding a lock it can take has found a dead writer (pids are reused; locks are not), and records what it left,
  a request that never finished with status 0 ("outcome unknown").
- Batches go to the store through `sink`, in chunks; a failed chunk is kept (up to `max_pending` records in memory;
  past that the oldest live only in the journal until the backlog is gone, then they are read back from it),
  retried with backoff, logged once per outage, and counted.
- Every record has an id made at `begin`, and the store counts an id once: a batch sent twice, or a journal
  replayed after its batch landed, changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import mmap
import os
import secrets
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from pydantic import ValidationError

from llmgw.router.long_marks import LongMarks
from llmgw.store.base import AnyUsage, Usage, UsageRecord

log = logging.getLogger(__name__)

UNKNOWN = 0  # status of a request whose outcome died with the router
UNSENT = 1  # journal only: the request never reached an engine after all (no record is made)
MAX_BACKOFF = 30.0
CHUNK = 5000  # records per call of the sink: a worker's report stays well under the management API's body limit
ADOPT_EVERY = 30  # flushes between looks for what dead processes left (a worker that crashed, say)
RESERVE = 1 << 20  # bytes of a segment reserved at a time, at least (doubling as it grows)


def _lock(path: Path) -> int | None:
    """An exclusive flock on `path` (created), or None when another living process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


# File systems where blocks reserved by posix_fallocate are the ones a later store into a shared map uses, so
# that a full disk cannot meet the store (SIGBUS, which would end the process). Copy-on-write file systems (btrfs,
# ZFS) allocate anew on every write, and glibc's fallback for a file system without fallocate reserves nothing:
# there lines go out by pwrite(), which a full disk fails with ENOSPC.
MAP_SAFE = frozenset({"ext2", "ext3", "ext4", "xfs", "tmpfs"})


def fs_type(path: Path, mounts: Path = Path("/proc/self/mounts")) -> str:
    """The type of the file system holding `path` ("" when it cannot be told)."""
    try:
        where = str(path.resolve())
        best, kind = "", ""
        for line in mounts.read_text().splitlines():
            fields = line.split()
            if len(fields) < 3:
                continue
            point = fields[1].replace("\\040", " ")
            inside = where == point or where.startswith(point.rstrip("/") + "/")
            if inside and len(point) >= len(best):
                best, kind = point, fields[2]
        return kind
    except OSError:
        return ""


def maps_safely(path: Path) -> bool:
    return fs_type(path) in MAP_SAFE


class Journal:
    """Append-only segments `<token>-<n>.jsonl`; a segment is deleted once its records landed. The segment being
    written is longer than its lines (the reserved rest is zeros) until it is sealed, which a reader of a dead
    writer's segment must expect (read_segments does)."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.token = secrets.token_hex(8)
        self.lock_path = self.dir / f"{self.token}.lock"
        lock = _lock(self.lock_path)
        assert lock is not None  # a fresh random name
        self._lock = lock
        self._n = 0
        self._fd = -1
        self._map: mmap.mmap | None = None
        self._off = 0  # where the next line goes: the lines written end here
        self._room = 0  # bytes reserved and mapped; sys.maxsize once lines go out by pwrite()
        self.path = Path()
        self.dirty = False
        self.mapped = maps_safely(directory)
        self._open_next()

    def _open_next(self) -> None:
        """The next segment's name; the file is made by the first line (append), so a failure to open it (too
        many open files, say) is one line's failure, tried again with the next, not the journal's end."""
        self._n += 1
        self.path = self.dir / f"{self.token}-{self._n}.jsonl"
        self._fd, self._off, self._room = -1, 0, 0

    def append(self, rec: AnyUsage) -> None:
        """Raises OSError when the line could not be kept (a full disk): nothing of it counts as written."""
        line = rec.json_line() if isinstance(rec, Usage) else rec.model_dump_json().encode() + b"\n"
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        end = self._off + len(line)
        if end > self._room:
            self._reserve(end)
        if self._map is not None:
            self._map[self._off : end] = line
        elif os.pwrite(self._fd, line, self._off) != len(line):  # a short write: the next line goes over it
            raise OSError(errno.ENOSPC, "usage journal: a line written in part")
        self._off = end
        self.dirty = True

    def _reserve(self, end: int) -> None:
        """Room for lines up to `end`: blocks reserved and mapped; else (no space to reserve, or a file system
        that cannot) lines go out by pwrite() from here on, which says so itself if the disk is full."""
        if self._map is not None:
            self._map.close()
            self._map = None
        room = max(end, 2 * self._room, RESERVE)
        self._room = sys.maxsize  # by pwrite() from here on, unless the room below is reserved and mapped
        if self.mapped:
            with contextlib.suppress(OSError):
                os.posix_fallocate(self._fd, 0, room)
                self._map = mmap.mmap(self._fd, room)
                self._room = room

    def _seal(self) -> None:
        """The segment as long as its lines (the reserved rest given back), closed."""
        if self._fd < 0:
            return
        if self._map is not None:
            self._map.close()
            self._map = None
        with contextlib.suppress(OSError):  # left longer, its zeros are skipped by readers all the same
            os.ftruncate(self._fd, self._off)
        os.close(self._fd)
        self._fd = -1

    def rotate(self, carry: list[Usage]) -> Path | None:
        """Start a new segment, carrying the requests still in flight into it; the old one's path, to delete once
        everything in it has landed, or None when nothing was written since the last rotation."""
        if not self.dirty:
            return None
        old = self.path
        self._seal()
        self._open_next()
        self.dirty = False
        try:
            for rec in carry:
                self.append(rec)
        except OSError as e:  # the old segment is returned all the same: what it holds must still be accounted for
            self.dirty = True  # and the carrying is tried again at the next rotation
            log.error("usage journal: requests in flight not carried into a new segment (%s): a crash now would "
                      "lose them", e)
        return old

    def close(self, keep: bool) -> None:
        self._seal()
        if not keep:
            self.path.unlink(missing_ok=True)
            self.lock_path.unlink(missing_ok=True)
        os.close(self._lock)  # with segments kept, the next process to look finds the lock free and takes them


def claim_orphans(directory: Path, mine: str) -> tuple[list[Path], list[tuple[int, Path]]]:
    """Segments of writers that are gone (their lock is free), and the locks now held on them (fd, path), so that
    no other process takes the same segments while they are recorded."""
    segments: list[Path] = []
    held: list[tuple[int, Path]] = []
    for lock_path in sorted(directory.glob("*.lock")):
        if lock_path.stem == mine:
            continue
        fd = _lock(lock_path)
        if fd is None:
            continue  # alive
        held.append((fd, lock_path))
        segments += sorted(directory.glob(f"{lock_path.stem}-*.jsonl"))
    return segments, held


def read_segments(paths: list[Path]) -> list[UsageRecord]:
    """The last word on each request in these segments; a torn last line is skipped."""
    latest: dict[str, UsageRecord] = {}
    for p in paths:
        try:
            data = p.read_bytes().rstrip(b"\0")  # a segment its writer never sealed: the reserved rest is zeros
        except FileNotFoundError:
            continue
        for line in data.splitlines():
            try:
                rec = UsageRecord.model_validate_json(line)
            except ValidationError:
                continue
            if rec.id not in latest or latest[rec.id].status == UNKNOWN:
                latest[rec.id] = rec
    return [r for r in latest.values() if r.status != UNSENT]


class UsageJournal:
    def __init__(
        self,
        sink: Callable[[list[AnyUsage]], Awaitable[object]],
        journal_dir: Path | None = None,
        max_pending: int = 200_000,
        adopt: bool = False,
    ) -> None:
        self.sink = sink
        self.marks: LongMarks | None = None  # with them, requests in flight for long are marked (long_marks.py)
        self.journal = Journal(journal_dir) if journal_dir is not None else None
        self.max_pending = max_pending
        self.adopt = adopt  # the server takes over what dead processes left; its workers do not
        self.pending: list[AnyUsage] = []  # ours, and what a journal read back held
        self.inflight: dict[str, Usage] = {}  # begun, not finished: carried into every new segment
        self.segments: list[Path] = []  # closed segments: their records are pending, landed, or (evicted) only there
        self.orphan_locks: list[tuple[int, Path]] = []  # (fd, lock file) of dead writers whose segments we hold
        self.failures = 0  # consecutive failed flushes
        self.failed_total = 0
        self.evicted = 0  # records pushed out of memory by max_pending: still in the kept segments
        self._failing = False
        self._journal_broken = False
        self._flushes = 0
        self._sending = 0  # records handed to the sink and not yet confirmed: still unflushed
        # called once what dead processes left has landed (the store holds usage no budget has counted)
        self.on_replayed: Callable[[], Awaitable[object]] | None = None
        self._replaying = False

    def adopt_orphans(self) -> int:
        """Take over what dead processes left in the journal directory."""
        if self.journal is None:
            return 0
        segments, held = claim_orphans(self.journal.dir, self.journal.token)
        records = read_segments(segments)
        self.pending.extend(records)
        self.segments.extend(segments)
        self.orphan_locks += held
        self._replaying = self._replaying or bool(records)
        if records:
            log.warning("recording %d request(s) left in the usage journal by a process that stopped", len(records))
        return len(records)

    def begin(self, rec: Usage) -> None:
        self.inflight[rec.id] = rec
        self._journal(rec)

    def unsent(self, rec: Usage) -> None:
        """The request begun as `rec` reached no engine: nothing to record."""
        self.inflight.pop(rec.id, None)
        if self.marks is not None:
            self.marks.forget(rec.id)
        rec.status = UNSENT
        self._journal(rec)

    def finish(self, rec: Usage, replica_id: str, prompt_tokens: int, completion_tokens: int, duration_s: float,
               status: int) -> None:
        """The request begun as `rec` ended so: `rec` becomes its record (its begin line is already written)."""
        self.inflight.pop(rec.id, None)
        if self.marks is not None:
            self.marks.forget(rec.id)
        rec.replica_id, rec.prompt_tokens, rec.completion_tokens = replica_id, prompt_tokens, completion_tokens
        rec.duration_s, rec.status = duration_s, status
        self.pending.append(rec)  # in memory first: a journal that cannot be written loses nothing here
        self._journal(rec)
        if len(self.pending) > self.max_pending:
            drop = len(self.pending) - self.max_pending
            del self.pending[:drop]
            if self.evicted == 0:
                log.error("usage backlog over %d records: the oldest wait in the journal until it drains",
                          self.max_pending)
            self.evicted += drop

    def _journal(self, rec: AnyUsage) -> None:
        if self.journal is None:
            return
        try:
            self.journal.append(rec)
            self._journal_broken = False
        except OSError as e:  # a full disk: the record is still in memory; a crash now would lose it
            if not self._journal_broken:
                log.error("usage journal cannot be written (%s): a crash now would lose in-flight usage", e)
            self._journal_broken = True

    @property
    def unflushed(self) -> int:
        return len(self.pending) + self._sending + self.evicted

    async def flush(self) -> bool:
        """Send what is pending; True when nothing is left behind."""
        if self.journal is not None:
            try:
                old = self.journal.rotate(list(self.inflight.values()))
            except OSError as e:
                log.error("usage journal cannot rotate: %s", e)
                old = None
            if old is not None:
                self.segments.append(old)
        if self.marks is not None:
            self.pending += self.marks.due(self.inflight.values())
        if not await self._send():
            return False
        if self.evicted:  # the backlog drained: what was pushed out of memory is read back from the journal
            # not what is in flight, nor what ended while the batch was on its way (in memory with its outcome):
            # their begin lines alone would record them as "outcome unknown", and the store keeps an id's first
            evicted = self.evicted
            skip = {r.id for r in self.inflight.values()} | {r.id for r in self.pending}
            back: list[AnyUsage] = [r for r in read_segments(self.segments) if r.id not in skip]
            self.pending = back + self.pending
            if not await self._send():
                return False
            self.evicted -= evicted  # pushed out since: in the segment being written, read back at a later flush
        for p in self.segments:
            p.unlink(missing_ok=True)
        self.segments.clear()
        for fd, lock in self.orphan_locks:
            lock.unlink(missing_ok=True)
            os.close(fd)
        self.orphan_locks.clear()
        if self._failing:
            log.warning("usage recorded again after %d failed attempt(s)", self.failures)
        self._failing, self.failures = False, 0
        if self._replaying and self.on_replayed is not None:
            await self.on_replayed()  # raising, it is called again after the next flush
        self._replaying = False
        return True

    async def _send(self) -> bool:
        batch, self.pending = self.pending, []
        sent = 0
        self._sending = len(batch)
        try:
            while sent < len(batch):
                await self.sink(batch[sent : sent + CHUNK])
                sent += min(CHUNK, len(batch) - sent)
                self._sending = len(batch) - sent
        except asyncio.CancelledError:
            self.pending = batch[sent:] + self.pending
            self._sending = 0
            raise
        except Exception as e:  # the store's trouble or the network's: keep what was not sent and try again
            self.pending = batch[sent:] + self.pending
            self._sending = 0
            self.failures += 1
            self.failed_total += 1
            if not self._failing:
                self._failing = True
                log.error("usage not recorded yet (%s); %d record(s) kept, retrying", e, len(self.pending))
            return False
        return True

    async def run(self, interval: float) -> None:
        while True:
            delay = interval if self.failures == 0 else min(MAX_BACKOFF, interval * 2**self.failures)
            await asyncio.sleep(delay)
            self._flushes += 1
            try:
                if self.adopt and self._flushes % ADOPT_EVERY == 0:
                    self.adopt_orphans()
                await self.flush()
            except Exception:  # never let a journal problem end the flushing for good
                log.exception("usage flush failed; retrying")
                self.failures += 1

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.flush()
        if self.journal is not None:
            keep = bool(self.pending or self.inflight or self.evicted or self.segments)
            self.journal.close(keep)
