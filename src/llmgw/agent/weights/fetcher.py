"""Have a shard's remote weights file on this node: one transfer per file however many shards want it, from the
peers the control plane names (a node of this fabric that holds it) and else from the origin, resumed across
attempts and across sources, verified, and only then given its name. Progress is kept for the heartbeat.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from llmgw.agent.redirects import PUBLIC_ONLY, Redirects
from llmgw.agent.space import free_bytes, room_again
from llmgw.agent.transfer import MinRate, Result, Source, fetch_part
from llmgw.agent.weights import local
from llmgw.agent.weights.directory import Directories
from llmgw.agent.weights.hubsource import Member, hub_source
from llmgw.agent.weights.outcome import Failed, Outcome, Ready, Waiting
from llmgw.agent.weights.serve import DIGEST_HEADER
from llmgw.core.backoff import doubling
from llmgw.core.clock import Clock
from llmgw.core.errors import TransferFailed, WeightsRefused
from llmgw.core.reasons import Reason
from llmgw.wire.hub import is_hub
from llmgw.wire.messages import FetchStatus, WeightsPlan

__all__ = ["Failed", "Fetcher", "Outcome", "Ready", "Waiting"]

log = logging.getLogger(__name__)

RETRY_BASE, RETRY_CAP = 1.0, 60.0  # a cut transfer is resumed soon; a failed one is tried again after FAILED_RETRY
FAILED_RETRY = 60.0
LOCAL_TROUBLE = {Reason.InsufficientDisk, Reason.DiskFull}
HUB_WAITS = {Reason.HubUnreachable}  # a reason a waiting transfer says instead of WeightsFetching
MIN_RATE, RATE_WINDOW = 64 * 1024.0, 60.0  # a source slower than 64 kB/s over a minute is left for the next


def _status(*, message: str = "", **kw: Any) -> FetchStatus:
    """A status the heartbeat can carry: the words bounded as the wire bounds them (a URL can be long)."""
    return FetchStatus(message=message[:2000], **kw)


@dataclass
class _Job:
    url: str
    plan: WeightsPlan
    member: Member | None = None  # a file of a model directory: reported with it, not on its own
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    status: FetchStatus | None = None
    failed_at: float = 0.0
    free_when_failed: int | None = None  # the disk's free bytes when the last attempt failed for want of space
    started: tuple[float, int] = (0.0, 0)  # (when, bytes) the current transfer began at: for its rate


class Fetcher:
    def __init__(self, weights_dir: Path, clock: Clock, tls: Callable[[], ssl.SSLContext] | None, node_id: str,
                 budget: int | None, max_bytes: int, network: Callable[[], bool], in_use: Callable[[], set[Path]],
                 timeout: float = 60.0, min_rate: float = MIN_RATE, rate_window: float = RATE_WINDOW,
                 redirects: Redirects = PUBLIC_ONLY) -> None:
        self.dir = weights_dir
        self.clock = clock
        self.tls = tls
        self.node_id = node_id
        self.budget = budget
        self.max_bytes = max_bytes
        self.network = network
        self.in_use = in_use
        self.timeout = timeout
        self.min_rate = MinRate(min_rate, rate_window, clock.monotonic)
        self.redirects = redirects  # where an origin may send this node
        self.jobs: dict[str, _Job] = {}
        # the jobs as threads read them: a tuple swapped whole on the event loop, never a dict changing under them
        self._job_list: tuple[_Job, ...] = ()
        self._finishing: dict[str, asyncio.Future[Path]] = {}  # renames still running in a thread, by URL
        self._room_lock = threading.Lock()
        self.directories = Directories(self)  # hub sources: a directory of files, each fetched as one here

    def ensure(self, url: str, plan: WeightsPlan | None, member: Member | None = None) -> Outcome:
        """Where the file (or a hub source's directory) is, or what is being done to have it (started here, once,
        if nothing is)."""
        plan = plan or WeightsPlan()
        if is_hub(url):
            return self.directories.ensure(url, plan)
        job = self.jobs.get(url)
        if job is None:
            job = self.jobs[url] = _Job(url, plan, member)
            self._job_list = tuple(self.jobs.values())
        else:
            job.member = member
            self.replan(url, plan)
        held = self._held(url, plan)
        if held is not None:
            job.status = None
            local.touch(held.path.parent)
            return Ready(held.path)
        st = job.status
        if job.task is None or job.task.done():
            if (st is not None and st.state == "failed" and self.clock.monotonic() - job.failed_at < FAILED_RETRY
                    and not room_again(self.dir, job.free_when_failed)):
                return Failed(st.reason, st.message)
            job.task = asyncio.create_task(self._run(job))
            st = None
        if st is None:  # a transfer just started, or one still ending for the plan before this one
            job.status = st = _status(source=url, state="waiting", message="starting")
        if st.state == "failed":
            return Failed(st.reason, st.message)
        return Waiting(st.words(), st.reason if st.reason in HUB_WAITS else Reason.WeightsFetching)

    def replan(self, url: str, plan: WeightsPlan) -> None:
        """A transfer under way, or waiting for a peer, reads its new plan now; nothing is started."""
        job = self.jobs.get(url)
        if job is not None and job.plan != plan:
            job.plan = plan
            job.changed.set()

    def arriving(self, but: object = None) -> dict[Path, int]:
        """The `.part` of every transfer under way (but `but`'s) and the whole size it is to reach: room is made
        beside them. One whose bytes have all arrived is counted on the disk alone (its part may be taking the
        file's name)."""
        out: dict[Path, int] = {}
        for j in self._job_list:
            if (j is not but and (st := j.status) is not None and st.state == "fetching" and st.total_bytes
                    and st.done_bytes < st.total_bytes and j.task is not None and not j.task.done()):
                target = local.target_for(self.dir, j.url)
                out[target.with_name(target.name + local.PART)] = st.total_bytes
        return out

    def _held(self, url: str, plan: WeightsPlan) -> local.Held | None:
        """The whole file this node holds for `url`, if it is the one the plan describes."""
        held = local.read_held(local.folder_for(self.dir, url))
        if held is None or (plan.sha256 and held.sha256 != plan.sha256) or (
                plan.size is not None and held.size != plan.size):
            return None
        return held

    def keep(self, urls: set[str]) -> None:
        """Stop transfers no shard wants any more (what arrived stays, for the next one to resume)."""
        urls = urls | self.directories.keep({u for u in urls if is_hub(u)})
        for url in list(self.jobs):
            if url not in urls:
                job = self.jobs.pop(url)
                self._job_list = tuple(self.jobs.values())
                if job.task is not None:
                    job.task.cancel()

    def stop(self, url: str) -> None:
        """End the transfer of `url` if one is under way (what arrived stays, for the next one to resume)."""
        job = self.jobs.get(url)
        if job is not None and job.task is not None and not job.task.done():
            job.task.cancel()

    def forget_disk_failure(self, url: str) -> None:
        """`url`'s last failure, for want of room, no longer holds its next try back (its directory tries again)."""
        job = self.jobs.get(url)
        if job is not None and job.status is not None and job.status.state == "failed" and (
                job.status.reason in LOCAL_TROUBLE):
            job.status = None

    def statuses(self) -> list[FetchStatus]:
        own = [j.status for j in self.jobs.values() if j.status is not None and j.member is None]
        return (self.directories.statuses() + own)[:64]

    async def close(self) -> None:
        await self.directories.close()
        tasks = [j.task for j in self.jobs.values() if j.task is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self, job: _Job) -> None:
        prior = self._finishing.pop(job.url, None)
        if prior is not None:
            job.status = _status(source=job.url, state="waiting", reason=Reason.WeightsFetching,
                                 message="finishing the last transfer of this file")
            await asyncio.wait({prior})  # an earlier job's rename, still running in its thread
            if not prior.cancelled():
                prior.exception()  # retrieved: that job's outcome was its own to report
            if self._held(job.url, job.plan) is not None:
                job.status = None
                return
        attempt = 0
        while True:
            try:
                path = await self._attempt(job)
            except TransferFailed as e:
                if not e.resumable:
                    self._failed(job, e)
                    log.error("weights %s: %s", job.url, e)
                    return
                wait = doubling(RETRY_BASE, RETRY_CAP, attempt)
                attempt += 1
                # a hub that cannot be reached (or answers 5xx) is said as such while the node keeps trying
                hub = job.member is not None and job.plan.origin and e.reason in (Reason.DownloadFailed,
                                                                                   Reason.HubUnreachable)
                job.status = _status(source=job.url, state="waiting", message=f"{e}; trying again in {wait:.0f} s",
                                     reason=Reason.HubUnreachable if hub else Reason.WeightsFetching)
                log.warning("weights %s: %s; trying again in %.0f s", job.url, e, wait)
                await asyncio.sleep(wait)
                continue
            except Exception as e:  # a transfer's trouble fails that file, never the agent; and it is said
                err = TransferFailed.from_os(e, f"cannot write in {self.dir}") if isinstance(e, OSError) else (
                    TransferFailed(Reason.DownloadFailed, f"{type(e).__name__}: {str(e)[:500]}"))
                self._failed(job, err)
                if err.reason in LOCAL_TROUBLE:
                    log.error("weights %s: %s", job.url, err)
                else:
                    log.exception("weights %s: failed", job.url)
                return
            if path is None:
                continue  # the plan changed while waiting
            job.status = None
            return

    def _failed(self, job: _Job, e: TransferFailed) -> None:
        job.status = _status(source=job.url, state="failed", message=str(e), reason=e.reason)
        job.failed_at = self.clock.monotonic()
        job.free_when_failed = free_bytes(self.dir) if e.reason in LOCAL_TROUBLE else None

    async def _attempt(self, job: _Job) -> Path | None:
        plan = job.plan
        folder = local.folder_for(self.dir, job.url)
        target = folder / local.file_name(job.url)
        part = target.with_name(target.name + local.PART)
        sources = [self._peer(job.url, p.node_id, p.address, p.port, plan.sha256) for p in plan.peers
                   if p.node_id != self.node_id]
        if plan.origin or sources:  # peers that fail fall back on the origin
            sources.append(Source(job.url, name="the origin", redirects=self.redirects) if job.member is None
                           else hub_source(job.url, plan, job.member, self.redirects))
        if not sources:
            job.status = _status(source=job.url, state="waiting", reason=Reason.WeightsFetching,
                                     message=f"waiting for {plan.wait_for or 'a node of this fabric'} to fetch it "
                                             "from the origin, to copy it from there")
            job.changed.clear()
            await job.changed.wait()
            return None
        await asyncio.to_thread(folder.mkdir, parents=True, exist_ok=True)
        last: TransferFailed | None = None
        for src in sources:
            try:
                got = await self._from(job, src, part, plan.size)
                # the rename runs to its end even if this job is cancelled meanwhile; a job started later for the
                # same file waits for it (see _run) rather than finding the .part and renaming it a second time
                done = self._finishing[job.url] = asyncio.ensure_future(
                    asyncio.to_thread(self._finish, job, plan, got, part, target, src))
                return await asyncio.shield(done)
            except TransferFailed as e:
                # a peer may have dropped the file since it last reported, or be gone: the next source is asked,
                # from where this one stopped. Only this node's own trouble (its disk) ends the attempt here.
                peer = _is_peer(src)
                if not e.resumable and (not peer or e.reason in LOCAL_TROUBLE):
                    raise
                last = e
                if peer:
                    log.warning("weights %s: %s; trying the next source", job.url, e)
        assert last is not None
        raise last

    def _peer(self, url: str, node_id: str, address: str, port: int, sha256: str) -> Source:
        host = f"[{address}]" if ":" in address else address
        return Source(f"https://{host}:{port}/v1/weights?source={quote(url, safe='')}",
                      ssl=self.tls() if self.tls is not None else None, server_hostname=node_id,
                      name=f"peer {node_id}", redirects=None, expect=(DIGEST_HEADER, sha256) if sha256 else None)

    async def _from(self, job: _Job, src: Source, part: Path, size: int | None) -> Result:
        via = src.name.removeprefix("peer ") if _is_peer(src) else "origin"
        what = f"fetching from {src.said()}" if via == "origin" else f"copying from {via}"
        have = part.stat().st_size if part.exists() else 0
        job.started = (self.clock.monotonic(), have)
        job.status = _status(source=job.url, state="fetching", via=via, done_bytes=have, total_bytes=size,
                                 message=what, reason=Reason.WeightsFetching)

        def progress(done: int, total: int | None) -> None:
            t0, b0 = job.started
            dt = self.clock.monotonic() - t0
            rate = (done - b0) / dt if dt > 0.5 and done > b0 else 0.0
            eta = (total - done) / rate if rate and total else None
            job.status = _status(source=job.url, state="fetching", via=via, done_bytes=done, total_bytes=total,
                                     rate_bps=min(rate, 1e13), eta_s=min(eta, 1e9) if eta is not None else None,
                                     message=what, reason=Reason.WeightsFetching)

        def room(n: int) -> None:
            with self._room_lock:  # transfers make room one at a time, each counting what the others still need
                keep = self.in_use() | self.directories.protected()
                removed = local.make_room(self.dir, n, self.budget, keep, self.network(), self.arriving(job))
            if removed:
                log.info("weights: removed %s (least recently used, no shard uses them) to make room for %s",
                         ", ".join(removed), job.url)

        if size is not None:
            await asyncio.to_thread(room, size - have)  # the disk is checked before anything is asked for
        log.info("weights %s: %s (from byte %d)", job.url, what, have)
        return await fetch_part(src, part, max_bytes=self.max_bytes, progress=progress, expected_size=size,
                                room=room, timeout=self.timeout, min_rate=self.min_rate)

    def _finish(self, job: _Job, plan: WeightsPlan, got: Result, part: Path, target: Path, src: Source) -> Path:
        if plan.sha256 and got.sha256 != plan.sha256:
            part.unlink(missing_ok=True)
            raise WeightsRefused(Reason.DigestMismatch, f"{target.name} from {src.said()}: sha256 is {got.sha256}, "
                                 f"the catalog says {plan.sha256}; removed")
        if plan.size is not None and got.size != plan.size:
            part.unlink(missing_ok=True)
            raise WeightsRefused(Reason.SizeMismatch, f"{target.name} from {src.said()} is {got.size} bytes, the "
                                 f"catalog says {plan.size}; removed")
        if got.size == 0 and job.member is None:  # a hub model may hold an empty file (an empty added_tokens.json)
            part.unlink(missing_ok=True)
            raise WeightsRefused(Reason.SizeMismatch, f"{target.name} from {src.said()} is empty; removed")
        m = job.member
        if m is not None and not plan.sha256 and m.git_sha1 and (blob := _git_sha1(part, got.size)) != m.git_sha1:
            part.unlink(missing_ok=True)
            raise WeightsRefused(Reason.DigestMismatch, f"{m.path} from {src.said()}: git blob id is {blob}, the "
                                 f"hub's file list says {m.git_sha1}; removed")
        target.unlink(missing_ok=True)  # a file there before (another digest) is never vouched for by this one
        if m is None:
            local.record(target.parent, job.url, got.size, got.sha256)
        else:
            local.record(target.parent, job.url, got.size, got.sha256, part_of=m.source)
        with part.open("ab") as f:  # append: an empty file is never asked for, so there may be no part yet
            os.fsync(f.fileno())
        os.replace(part, target)
        dfd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        log.info("weights %s: %s whole from %s (%d bytes, sha256 %s)", job.url, target, src.said(), got.size,
                 got.sha256)
        return target


def _is_peer(src: Source) -> bool:
    return src.name.startswith("peer ")


def _git_sha1(path: Path, size: int) -> str:
    """The id git gives the file's content: sha1 of "blob <size>\\0" and the bytes."""
    h = hashlib.sha1(b"blob %d\0" % size, usedforsecurity=False)
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()
