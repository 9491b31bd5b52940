"""Have a hub model's directory on this node: every file of the resolved commit fetched as any weights file is
(one transfer per URL, resumed, verified, from the fabric's peers or the hub, within the disk budget), a few at a
time, then the directory laid out (hubdir.py). Reported as one fetch: its files' bytes and count summed."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from llmgw.agent.space import free_bytes, room_again
from llmgw.agent.weights import hubdir, local
from llmgw.agent.weights.hubsource import Member
from llmgw.agent.weights.outcome import Failed, Outcome, Ready, Waiting
from llmgw.core.clock import Clock
from llmgw.core.errors import TransferFailed
from llmgw.core.reasons import Reason
from llmgw.wire.hub import HubFile, file_url, parse_hub
from llmgw.wire.messages import FetchStatus, WeightsPlan

log = logging.getLogger(__name__)

PARALLEL = 4  # files of one directory in flight at once
FAILED_RETRY = 60.0
ENDS_ALL = {Reason.HubAccessDenied, Reason.RevisionGone, Reason.HubNotFound, Reason.InsufficientDisk,
            Reason.DiskFull}  # as for a single file: a failed directory is tried again by a later shard after this


class FileJob(Protocol):
    """One file's transfer, as the fetcher keeps it."""

    @property
    def task(self) -> asyncio.Task[None] | None: ...

    @property
    def status(self) -> FetchStatus | None: ...


class FileFetcher(Protocol):
    """What a directory needs of the fetcher that has each of its files (weights/fetcher.py)."""

    @property
    def dir(self) -> Path: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def budget(self) -> int | None: ...

    @property
    def network(self) -> Callable[[], bool]: ...

    @property
    def in_use(self) -> Callable[[], set[Path]]: ...

    @property
    def jobs(self) -> Mapping[str, FileJob]: ...

    def ensure(self, url: str, plan: WeightsPlan | None, member: Member | None = None) -> Outcome: ...

    def replan(self, url: str, plan: WeightsPlan) -> None: ...

    def arriving(self, but: object = None) -> dict[Path, int]: ...

    def stop(self, url: str) -> None: ...

    def forget_disk_failure(self, url: str) -> None: ...


@dataclass
class _Dir:
    source: str
    plan: WeightsPlan
    task: asyncio.Task[None] | None = None
    whole: set[str] = field(default_factory=set)  # paths of its files held whole
    failure: Failed | None = None
    failed_at: float = 0.0
    free_when_failed: int | None = None
    ready: bool = False  # whole under its name when last looked at: nothing to report as a fetch


def _unusable(source: str, plan: WeightsPlan) -> str:
    """Why this plan cannot be fetched from, in words; "" when it can."""
    if not hubdir.pinned(source):
        return f"{source[:300]} is not pinned to a commit: the control plane has not resolved it yet"
    if not plan.files or not plan.base_url:
        return f"the control plane sent no file list for {source} (it has not resolved it yet)"
    return ""


class Directories:
    def __init__(self, fetcher: FileFetcher) -> None:
        self.fetcher = fetcher
        self.dirs: dict[str, _Dir] = {}

    def ensure(self, source: str, plan: WeightsPlan) -> Outcome:
        """Where the directory is, or what is being done to have it (started here, once, if nothing is)."""
        why = _unusable(source, plan)
        if why:
            return Waiting(why, Reason.HubResolving)
        d = self.dirs.get(source)
        if d is None:
            d = self.dirs[source] = _Dir(source, plan)
        elif d.plan != plan:
            self._replan(d, plan)
        held = hubdir.read_dir(hubdir.dir_for(self.fetcher.dir, source))
        d.ready = held is not None and hubdir.matches(held, plan)
        if held is not None and d.ready:
            d.failure = None
            for t in hubdir.targets(self.fetcher.dir, plan):
                local.touch(t.parent)
            return Ready(held.path)
        if d.task is None or d.task.done():
            if (d.failure is not None and self.fetcher.clock.monotonic() - d.failed_at < FAILED_RETRY
                    and not room_again(self.fetcher.dir, d.free_when_failed)):
                return d.failure
            if d.failure is not None:
                self._forget_disk_failures(d)
            d.failure = None
            d.task = asyncio.create_task(self._run(d))
        st = self._status(d)
        if st.state == "failed":
            return Failed(st.reason, st.message)
        return Waiting(st.words(), st.reason if st.reason == Reason.HubUnreachable else Reason.WeightsFetching)

    def _forget_disk_failures(self, d: _Dir) -> None:
        """The directory is tried again (room is back, or its wait is over): so are its files that failed for want
        of room. A file's own failure may have been recorded after the room came back (a transfer stopping as it
        met the full disk), and would otherwise fail the new attempt with the old words."""
        for f in d.plan.files:
            self.fetcher.forget_disk_failure(self._url(d, f))

    def _replan(self, d: _Dir, plan: WeightsPlan) -> None:
        """Peers and roles change as the fabric does: each file under way reads them now. Another file list (or
        base) is another directory to make: the one under way stops, keeping what arrived."""
        same = plan.files == d.plan.files and plan.base_url == d.plan.base_url
        d.plan = plan
        if not same:
            if d.task is not None:
                d.task.cancel()
            d.task, d.whole, d.failure = None, set(), None
            return
        for f in plan.files:
            self.fetcher.replan(self._url(d, f), self._file_plan(plan, f))

    def keep(self, sources: set[str]) -> set[str]:
        """Stop directories no shard wants any more; the URLs of the files of those it still wants."""
        for source in list(self.dirs):
            if source not in sources:
                d = self.dirs.pop(source)
                if d.task is not None:
                    d.task.cancel()
        return {self._url(d, f) for d in self.dirs.values() for f in d.plan.files}

    def protected(self) -> set[Path]:
        """The files of every directory wanted: never removed to make room for one another."""
        out: set[Path] = set()
        for d in list(self.dirs.values()):
            out |= hubdir.targets(self.fetcher.dir, d.plan)
        return out

    def statuses(self) -> list[FetchStatus]:
        return [self._status(d) for d in self.dirs.values() if not d.ready]

    async def close(self) -> None:
        tasks = [d.task for d in self.dirs.values() if d.task is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    @staticmethod
    def _url(d: _Dir, f: HubFile) -> str:
        return file_url(d.plan.base_url, f.path)

    @staticmethod
    def _file_plan(plan: WeightsPlan, f: HubFile) -> WeightsPlan:
        return plan.model_copy(update={"sha256": f.sha256, "size": f.size, "files": []})

    def _member(self, d: _Dir, f: HubFile) -> Member:
        return Member(d.source, parse_hub(d.source).revision, f.path, f.git_sha1)

    async def _run(self, d: _Dir) -> None:
        """Make room for what is missing, fetch the files, lay the directory out; a failure is kept for ensure()."""
        fetcher = self.fetcher
        try:
            await asyncio.to_thread(self._room, d)
            failed = await self._files(d)
            if failed is None:
                path = await asyncio.to_thread(hubdir.assemble, fetcher.dir, d.source, d.plan)
                d.ready = True
                log.info("weights %s: whole in %s (%d files)", d.source, path, len(d.plan.files))
                return
        except TransferFailed as e:
            failed = Failed(e.reason, str(e))
        except OSError as e:
            err = TransferFailed.from_os(e, f"cannot lay out {d.source} in {fetcher.dir}")
            failed = Failed(err.reason, str(err))
        except Exception as e:  # a directory's trouble fails that directory, never the agent; and it is said
            log.exception("weights %s: failed", d.source)
            failed = Failed(Reason.DownloadFailed, f"{type(e).__name__}: {str(e)[:500]}")
        d.failure = Failed(failed.reason, f"{d.source}: {failed.message}"[:2000])
        d.failed_at = fetcher.clock.monotonic()
        d.free_when_failed = free_bytes(fetcher.dir) if failed.reason in (Reason.InsufficientDisk,
                                                                        Reason.DiskFull) else None
        log.error("weights %s: %s", d.source, failed.message)

    async def _files(self, d: _Dir) -> Failed | None:
        """Every file, a few at a time; the first failure, once the others have ended (kept whole for the next
        try), or at once when it is one every other file would meet too (no access, no such commit, no room)."""
        gate = asyncio.Semaphore(PARALLEL)
        tasks = [asyncio.ensure_future(self._file(d, f, gate)) for f in d.plan.files]
        failed: Failed | None = None
        try:
            for next_done in asyncio.as_completed(tasks):
                got = await next_done
                failed = failed or got
                if got is not None and got.reason in ENDS_ALL:
                    # the files under way stop too (what they wrote stays): their failure, met later, is not to
                    # be the next attempt's
                    for f in d.plan.files:
                        self.fetcher.stop(self._url(d, f))
                    break
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return failed

    def _room(self, d: _Dir) -> None:
        """The directory's size is known before a byte is asked for: room for all of what is missing, at once."""
        f = self.fetcher
        f.dir.mkdir(parents=True, exist_ok=True)
        need = 0
        for hf in d.plan.files:
            t = hubdir.target(f.dir, d.plan.base_url, hf)
            if local.read_held(t.parent) is None:
                part = t.with_name(t.name + local.PART)
                need += max(0, hf.size - (part.stat().st_size if part.exists() else 0))
        if need:
            local.make_room(f.dir, need, f.budget, f.in_use() | self.protected(), f.network(), f.arriving())

    async def _file(self, d: _Dir, f: HubFile, gate: asyncio.Semaphore) -> Failed | None:
        """One file, a few at a time: None once whole, else why not."""
        url = self._url(d, f)
        async with gate:
            while True:
                got = self.fetcher.ensure(url, self._file_plan(d.plan, f), self._member(d, f))
                if isinstance(got, Ready):
                    d.whole.add(f.path)
                    return None
                if isinstance(got, Failed):
                    return got
                task = self.fetcher.jobs[url].task
                if task is not None:
                    await asyncio.wait({task})

    def _status(self, d: _Dir) -> FetchStatus:
        """The directory as one fetch: its files' bytes and count summed, the words of one under way."""
        if d.failure is not None:
            return FetchStatus(source=d.source, state="failed", message=d.failure.message, reason=d.failure.reason,
                               done_files=len(d.whole), total_files=len(d.plan.files))
        total = sum(f.size for f in d.plan.files)
        done, rate, via, what = 0, 0.0, "", ""
        waiting: FetchStatus | None = None
        for f in d.plan.files:
            if f.path in d.whole:
                done += f.size
                continue
            job = self.fetcher.jobs.get(self._url(d, f))
            st = job.status if job is not None else None
            if st is None:
                continue
            done += st.done_bytes
            if st.state == "fetching":
                rate += st.rate_bps
                via, what = via or st.via, what or st.message
            elif waiting is None or st.reason == Reason.HubUnreachable:
                waiting = st
        st = FetchStatus(source=d.source, state="waiting", done_bytes=min(done, total), total_bytes=total,
                         done_files=len(d.whole), total_files=len(d.plan.files), reason=Reason.WeightsFetching,
                         message=waiting.message[:2000] if waiting is not None else "starting")
        if what:
            eta = min((total - done) / rate, 1e9) if rate else None
            return st.model_copy(update={"state": "fetching", "via": via, "rate_bps": min(rate, 1e13), "eta_s": eta,
                                         "message": what})
        if waiting is not None and waiting.reason:
            return st.model_copy(update={"reason": waiting.reason})
        return st
