"""Usage on its way to the store: journaled before the answer ends, flushed in batches, retried, never lost.

Usage is what operators bill from, so a request that reached an engine is recorded exactly once, whatever the
client, the store or this process does:
- `begin` appends the request to a journal file the moment it is sent to an engine, `finish` appends its outcome
  before the last byte of the answer goes out. A journal line is one `write()`: a killed process loses nothing
  the kernel has (a crashed machine can lose the last moments of its page cache). A process starting over the
  journal of a dead one records what it finds, a request that never finished with status 0 ("outcome unknown").
- Batches go to the store through `sink`; a failed batch is kept (up to `max_pending` records in memory, the rest
  stay in the journal for the next start), retried with backoff, logged once per outage, and counted.
- Every record has an id made at `begin`, and the store counts an id once: a batch sent twice, or a journal
  replayed after its batch landed, changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

from pydantic import ValidationError

from llmgw.store.base import UsageRecord

log = logging.getLogger(__name__)

UNKNOWN = 0  # status of a request whose outcome died with the router
UNSENT = 1  # journal only: the request never reached an engine after all (no record is made)
MAX_BACKOFF = 30.0


class Journal:
    """Append-only segments `<pid>-<n>.jsonl` in one directory; a segment is deleted once its records landed."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self._n = 0
        self._fd = -1
        self.path = Path()
        self.dirty = False
        self._open_next()

    def _open_next(self) -> None:
        self._n += 1
        self.path = self.dir / f"{os.getpid()}-{self._n}.jsonl"
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def append(self, rec: UsageRecord) -> None:
        os.write(self._fd, rec.model_dump_json().encode() + b"\n")
        self.dirty = True

    def rotate(self, carry: list[UsageRecord]) -> Path | None:
        """Start a new segment, carrying the requests still in flight into it; the old one's path, to delete once
        everything in it has landed, or None when nothing was written since the last rotation."""
        if not self.dirty:
            return None
        old = self.path
        os.close(self._fd)
        self._open_next()
        self.dirty = False
        for rec in carry:
            self.append(rec)
        return old

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def orphaned_segments(directory: Path) -> list[Path]:
    """Segments whose writing process is gone (it crashed, or stopped before it could flush)."""
    out = []
    for p in sorted(directory.glob("*.jsonl")):
        pid = p.name.split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not Path(f"/proc/{pid}").exists():
            out.append(p)
    return out


def read_segments(paths: list[Path]) -> list[UsageRecord]:
    """The last word on each request in these segments; a torn last line is skipped."""
    latest: dict[str, UsageRecord] = {}
    for p in paths:
        for line in p.read_bytes().splitlines():
            try:
                rec = UsageRecord.model_validate_json(line)
            except ValidationError:
                continue
            if rec.id not in latest or latest[rec.id].status == UNKNOWN:
                latest[rec.id] = rec
    return [r for r in latest.values() if r.status != UNSENT]


class UsageLedger:
    def __init__(
        self,
        sink: Callable[[list[UsageRecord]], Awaitable[object]],
        journal_dir: Path | None = None,
        max_pending: int = 200_000,
    ) -> None:
        self.sink = sink
        self.journal = Journal(journal_dir) if journal_dir is not None else None
        self.max_pending = max_pending
        self.pending: list[UsageRecord] = []
        self.inflight: dict[str, UsageRecord] = {}  # begun, not finished: carried into every new segment
        self.segments: list[Path] = []  # closed segments whose records are in `pending` or already landed
        self.failures = 0  # consecutive failed flushes
        self.failed_total = 0
        self.evicted = 0  # records pushed out of memory by max_pending (they stay in the journal)
        self._failing = False

    def adopt_orphans(self) -> int:
        """Take over what dead processes left in the journal directory."""
        if self.journal is None:
            return 0
        orphans = orphaned_segments(self.journal.dir)
        records = read_segments(orphans)
        self.pending.extend(records)
        self.segments.extend(orphans)
        if records:
            log.warning("recording %d request(s) left in the usage journal by a process that stopped", len(records))
        return len(records)

    def begin(self, rec: UsageRecord) -> None:
        self.inflight[rec.id] = rec
        if self.journal is not None:
            self.journal.append(rec)

    def unsent(self, rec: UsageRecord) -> None:
        """The request begun as `rec` reached no engine: nothing to record."""
        self.inflight.pop(rec.id, None)
        if self.journal is not None:
            self.journal.append(rec.model_copy(update={"status": UNSENT}))

    def finish(self, rec: UsageRecord) -> None:
        self.inflight.pop(rec.id, None)
        if self.journal is not None:
            self.journal.append(rec)
        self.pending.append(rec)
        if len(self.pending) > self.max_pending:
            drop = len(self.pending) - self.max_pending
            del self.pending[:drop]
            self.evicted += drop
            if self.evicted == drop:
                log.error("usage backlog over %d records: the oldest stay only in the journal until a restart",
                          self.max_pending)

    @property
    def unflushed(self) -> int:
        return len(self.pending) + self.evicted

    async def flush(self) -> bool:
        """Send what is pending; True when nothing is left behind."""
        if self.journal is not None:
            old = self.journal.rotate(list(self.inflight.values()))
            if old is not None:
                self.segments.append(old)
        batch = list(self.pending)
        if batch:
            try:
                await self.sink(batch)
            except Exception as e:  # the store's trouble or the network's: keep everything and try again
                self.failures += 1
                self.failed_total += 1
                if not self._failing:
                    self._failing = True
                    log.error("usage not recorded yet (%s); %d record(s) kept, retrying", e, len(batch))
                return False
            del self.pending[: len(batch)]
        if self._failing:
            log.warning("usage recorded again after %d failed attempt(s)", self.failures)
        self._failing, self.failures = False, 0
        if self.evicted == 0:  # with records only in the journal, its segments are all that holds them
            for p in self.segments:
                p.unlink(missing_ok=True)
            self.segments.clear()
        return True

    async def run(self, interval: float) -> None:
        while True:
            delay = interval if self.failures == 0 else min(MAX_BACKOFF, interval * 2**self.failures)
            await asyncio.sleep(delay)
            await self.flush()

    async def close(self) -> None:
        await self.flush()
        if self.journal is not None:
            self.journal.close()
            if not self.pending and not self.inflight and self.evicted == 0:
                self.journal.path.unlink(missing_ok=True)
