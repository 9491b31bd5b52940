"""Converge a node on the engines its control plane names. Level-triggered: converge() is called every pass and
starts, at most once per engine, an install that runs in the background while the agent goes on reporting. An
engine is reported from the build installed and seen to run (re-checked), the install under way, or why the last
attempt failed; never because it is on disk."""

from __future__ import annotations

import asyncio
import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import TypeAdapter

from llmgw.agent.engines import ADAPTERS
from llmgw.agent.installs.probe import probe
from llmgw.agent.installs.recipes import (
    Context,
    Step,
    current_build,
    download_names,
    install,
    stale_downloads,
)
from llmgw.agent.space import free_bytes, room_again
from llmgw.agent.supervisor.process import write_private
from llmgw.core.backoff import doubling
from llmgw.core.errors import InstallRefused
from llmgw.core.reasons import Reason
from llmgw.wire.builds import NodeFacts, PassedOver, choose_build
from llmgw.wire.engines import EngineSource, EngineVariant
from llmgw.wire.messages import BuildPassedOver, EngineStatus, Hardware, InstallStatus

log = logging.getLogger(__name__)

RECHECK_S = 600.0
RETRY_FIRST_S = 60.0
RETRY_MAX_S = 600.0
WANTED_FILE = "wanted.json"
_WANTED = TypeAdapter(list[EngineSource])
COUNT_MAX = 2**53  # the wire's bound on a count: a server may claim any Content-Length
# an install that failed for these reasons failed because of this node (a library its C library or driver lacks):
# a GPU build refused so is passed over for the next that fits, until the node's hardware changes
NODE_REFUSALS = frozenset({Reason.MissingLibraries, Reason.EngineCannotRun, Reason.LibcTooOld})


@dataclass
class Track:
    """One engine this node was told to have."""

    source: EngineSource
    variant: EngineVariant | None = None
    note: str = ""  # why this build (a driver with no CUDA build), or why none fits
    passed_over: tuple[PassedOver, ...] = ()  # better builds not taken, each with its reason
    refused: dict[str, PassedOver] = field(default_factory=dict)  # builds whose install failed here for the node's sake
    facts: NodeFacts | None = None  # what the choice was made from: new facts clear `refused`
    status: EngineStatus | None = None  # the installed build as last checked
    checked_at: float = float("-inf")
    progress: str = ""
    # the install under way as numbers: its step, and the bytes of that step done and in all (None: not known)
    step: Step = "installing"
    done_bytes: int = 0
    total_bytes: int | None = None
    failure: tuple[str, str] | None = None  # (reason, words) of the last failed attempt
    failures: int = 0
    retry_at: float = float("-inf")
    free_when_failed: int | None = None  # the disk's free bytes when the last attempt failed for want of space
    task: asyncio.Task[None] | None = field(default=None, repr=False)  # an install under way
    check: asyncio.Task[None] | None = field(default=None, repr=False)  # a re-check under way (vLLM's takes 20 s)


def _waits(s: EngineSource, v: EngineVariant | None) -> bool:
    """The control plane has not read the release's digest list yet, and this build needs a digest from it: the
    node waits rather than read the list itself (a fleet would exhaust its publisher's budget) or fall back."""
    return s.digests_pending and v is not None and v.unpinned


def _built_for(status: EngineStatus, s: EngineSource, v: EngineVariant | None) -> bool:
    """Whether a reported build is of this version and variant (its directory says so)."""
    return v is not None and f"/{s.name}/{s.version}-{v.variant}" in status.path


class Installer:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.tracks: dict[str, Track] = {}
        self.settled = False  # the first pass over what is on disk is done: reports now mean "has" or "has none"

    # -- what the control plane wants ---------------------------------------------------------------------------

    def load_wanted(self) -> list[EngineSource]:
        """What the last control plane asked for, so a restarted agent reports its engines from its first heartbeat
        rather than dropping out of placement until the control plane answers."""
        try:
            return _WANTED.validate_json((self.ctx.root / WANTED_FILE).read_bytes())
        except (OSError, ValueError):  # missing, or not what this agent wrote: the control plane will say again
            return []

    def _save_wanted(self, sources: list[EngineSource]) -> None:
        write_private(self.ctx.root / WANTED_FILE, _WANTED.dump_json(sources).decode())

    async def converge(self, sources: list[EngineSource], hw: Hardware | None, in_use: set[Path]) -> None:
        """`hw` None: this node has not read its hardware yet. Then nothing is chosen, started or removed: a build
        chosen for an unknown processor would be none, and every build would look unwanted."""
        if hw is not None and not hw.arch:
            hw = None  # a processor nobody read is not "no build fits"
        first: dict[str, EngineSource] = {}
        for s in sources:  # one entry per engine (the first): two would cancel each other's install every pass
            first.setdefault(s.name, s)
        sources = list(first.values())
        if [t.source for t in self.tracks.values()] != sources:
            try:
                self._save_wanted(sources)
            except OSError as e:
                log.warning("cannot record the wanted engines under %s: %s", self.ctx.root, e.strerror)
        now = self.ctx.clock.monotonic()
        wanted = {s.name: s for s in sources}
        for name in list(self.tracks):
            if name not in wanted:
                self._cancel(self.tracks.pop(name))
        for s in sources:
            t = self.tracks.get(s.name)
            if t is None or t.source != s:
                if t is not None:
                    self._cancel(t)
                t = self.tracks[s.name] = Track(source=s)
            if t.task is not None:
                continue  # an install is running; it reports its own progress
            if s.name not in ADAPTERS or ADAPTERS[s.name].packaging.kind == "builtin":
                continue
            if hw is None:  # what is installed is still reported (an engine to adopt needs it); nothing else
                if t.status is None:
                    t.status = await self._installed_any(s)
                    t.checked_at = now
                continue
            facts = NodeFacts(arch=hw.arch, nvidia_driver=hw.nvidia_driver, nvidia_cuda=hw.nvidia_cuda,
                              glibc=hw.glibc, gpus_without_driver=0 if hw.nvidia_driver else len(hw.gpus))
            if facts != t.facts:  # a driver or C library changed: what failed before may run now
                t.facts, t.refused = facts, {}
            # builds whose digest the control plane could not learn are passed over with its words, as refused ones
            unknown = {v: PassedOver(v, Reason.DigestUnknown, words) for v, words in s.digests_unknown.items()}
            choice = choose_build(s, facts, unknown | t.refused)
            variant, t.note, t.passed_over = choice.variant, choice.note, choice.passed_over
            if variant != t.variant:  # a driver came or went: what was checked is not what is wanted now
                if t.check is not None:
                    t.check.cancel()
                    t.check = None
                if t.variant is not None or t.status is None or not _built_for(t.status, s, variant):
                    t.status = None
                t.variant, t.failure, t.failures, t.retry_at = variant, None, 0, float("-inf")
            if t.variant is None:
                t.failure = (Reason.NoBuildForNode, t.note)
                continue
            if t.status is None:
                t.status = await self._installed(s, t.variant)
                t.checked_at = now
            elif now - t.checked_at >= RECHECK_S and t.check is None:
                t.checked_at = now
                t.check = asyncio.create_task(self._recheck(t, t.status.path))
                continue  # the heartbeat goes on meanwhile; what it finds is acted on by a later pass
            if t.check is None and (t.status is None or not t.status.runs) and not _waits(s, t.variant) and (
                    now >= t.retry_at or room_again(self.ctx.root, t.free_when_failed)):
                t.task = asyncio.create_task(self._attempt(t))
        self.settled = True
        if hw is not None:
            self._remove_unused(in_use)

    async def _installed_any(self, s: EngineSource) -> EngineStatus | None:
        """The newest build of this version marked installed, whichever variant: for a node that cannot yet say
        which it wants. It is chosen again once the hardware is known."""
        for v in s.variants:
            st = await self._installed(s, v)
            if st is not None:
                return st
        return None

    async def _installed(self, s: EngineSource, v: EngineVariant) -> EngineStatus | None:
        """This build as found on disk: marked installed, and seen to run now."""
        found = current_build(self.ctx.root, s, v)
        if found is None:
            return None
        d, marker = found
        return await probe(s.name, str(d / marker["executable"]))

    async def _recheck(self, t: Track, path: str) -> None:
        wanted = t.variant
        try:
            status = await probe(t.source.name, path)
            if t.task is None and t.variant == wanted:  # else what it checked is no longer what is wanted
                t.status = status
            if not status.runs:
                log.error("%s %s no longer runs: %s", t.source.name, t.source.version, status.message)
        finally:
            t.check = None

    async def _attempt(self, t: Track) -> None:
        assert t.variant is not None
        s, v = t.source, t.variant

        def say(words: str) -> None:
            if words != t.progress:
                log.info("%s", words)
            t.progress = words[:2000]

        def mark(step: Step, done: int, total: int | None) -> None:
            t.step, t.done_bytes, t.total_bytes = step, done, total

        mark("installing", 0, None)
        say(f"installing {s.name} {s.version} ({v.variant})")
        try:
            t.status = await install(self.ctx, s, v, say, mark, t.facts.glibc if t.facts is not None else "")
            t.checked_at = self.ctx.clock.monotonic()
            t.failure, t.failures = None, 0
            log.info("installed %s %s (%s) at %s", s.name, s.version, v.variant, t.status.path)
        except InstallRefused as e:
            self._failed(t, e.reason, str(e))
        except Exception as e:  # a bug must not stop the agent: it is reported like any other failure
            log.exception("installing %s %s failed", s.name, s.version)
            self._failed(t, Reason.EngineInstallFailed, f"{type(e).__name__}: {e}")
        finally:
            t.progress, t.task = "", None
            mark("installing", 0, None)

    def refuse(self, name: str, reason: Reason, words: str) -> bool:
        """The build of `name` in use installed and started, and does not run as it must here (a GPU build that
        holds nothing on its GPUs): passed over for the next that fits until the node's hardware changes. False
        when no installed build is in use for it, or it is a CPU one (nothing to pass over to)."""
        t = self.tracks.get(name)
        v = t.variant if t is not None else None
        if t is None or v is None or v.accelerator == "cpu":
            return False
        t.refused[v.variant] = PassedOver(v.variant, reason, f"{v.variant} {words[:1500]}")
        log.error("%s %s: %s %s; the next build that fits is tried", name, t.source.version, v.variant, words)
        return True

    def _failed(self, t: Track, reason: str, words: str) -> None:
        v = t.variant
        if reason in NODE_REFUSALS and v is not None and v.accelerator != "cpu":
            # the next pass takes the next build that fits; this one is named among those passed over
            t.refused[v.variant] = PassedOver(v.variant, Reason(reason), f"{v.variant} was installed and does not "
                                              f"run on this node: {words[:1500]}")
            log.error("%s %s: %s does not run here (%s); the next build that fits is tried", t.source.name,
                      t.source.version, v.variant, words)
            return
        t.failures += 1
        delay = doubling(RETRY_FIRST_S, RETRY_MAX_S, t.failures - 1)
        t.retry_at = self.ctx.clock.monotonic() + delay
        t.failure = (reason, words[:1800])
        t.free_when_failed = free_bytes(self.ctx.root) if reason == Reason.DiskFull else None
        log.error("installing %s %s failed (next attempt in %.0fs): %s", t.source.name, t.source.version, delay, words)

    def _cancel(self, t: Track) -> None:
        for task in (t.task, t.check):
            if task is not None:
                task.cancel()

    def _remove_unused(self, in_use: set[Path]) -> None:
        """Builds that are not the one in use for their engine, once no shard runs from them, and what attempts left
        behind. Never anything of an engine whose install is running, nor a build a shard or agent.yaml uses."""
        keep = set()
        for t in self.tracks.values():
            if t.status is not None and t.status.path:
                keep |= {p for p in Path(t.status.path).parents if p.parent.parent == self.ctx.root}
        # a re-check reads the reported build, which is kept anyway; an install writes where nothing may be removed
        busy = {name for name, t in self.tracks.items() if t.task is not None}

        def used(d: Path) -> bool:
            return d in keep or any(p == d or d in p.parents for p in in_use)

        for engine in ADAPTERS:
            if engine in busy:
                continue
            engine_dir = self.ctx.root / engine
            for d in sorted(engine_dir.iterdir()) if engine_dir.is_dir() else []:
                if d.is_dir() and not d.is_symlink() and not used(d):
                    log.info("removing %s: not the build in use, and no shard runs from it", d)
                    shutil.rmtree(d, ignore_errors=True)
        if not busy:
            keep_files = {n for t in self.tracks.values() if t.variant is not None
                          for n in download_names(t.source, t.variant)}
            for f in stale_downloads(self.ctx.root, keep_files):
                log.info("removing %s: a download nothing wants", f)
                if f.is_dir() and not f.is_symlink():
                    shutil.rmtree(f, ignore_errors=True)
                else:
                    f.unlink(missing_ok=True)

    # -- what the node reports ----------------------------------------------------------------------------------

    def statuses(self) -> list[EngineStatus]:
        return [st.model_copy(update=self._build_of(self.tracks[st.name])) if st.name in self.tracks else st
                for st in self._statuses()]

    @staticmethod
    def _build_of(t: Track) -> dict[str, object]:
        passed = [BuildPassedOver(variant=p.variant, reason=p.reason, message=p.message[:2000])
                  for p in t.passed_over[:16]]
        return {"variant": t.variant.variant if t.variant is not None else "", "passed_over": passed}

    def _statuses(self) -> list[EngineStatus]:
        out = []
        for name, t in sorted(self.tracks.items()):
            s = t.source
            if name not in ADAPTERS:
                out.append(EngineStatus(name=name[:128], version=s.version, runs=False,
                                        reason=Reason.EngineInstallFailed,
                                        message=f"this agent does not know the engine {name!r}: upgrade it"))
                continue
            if ADAPTERS[name].packaging.kind == "builtin":
                continue
            if t.task is not None:
                out.append(EngineStatus(name=name, version=s.version, runs=False, reason=Reason.EngineInstalling,
                                        message=t.progress or f"installing {name} {s.version}"))
            elif t.status is not None and t.status.runs:
                note = "; ".join(w for w in (t.status.message, t.note) if w)
                out.append(t.status.model_copy(update={"message": note[:2000]}))
            elif _waits(s, t.variant):
                out.append(EngineStatus(name=name, version=s.version, runs=False, reason=Reason.EngineInstalling,
                                        message=f"waiting for the control plane to read the digest list of {name} "
                                                f"{s.version}"))
            elif t.failure is not None:
                reason, words = t.failure
                out.append(EngineStatus(name=name, version=s.version, runs=False, reason=reason,
                                        message=f"install failed: {words}"))
            elif t.status is not None:
                out.append(t.status)
        return out

    def progress(self) -> list[str]:
        return [t.progress for t in self.tracks.values() if t.task is not None and t.progress]

    def installs(self) -> list[InstallStatus]:
        """The installs under way, as numbers."""
        return [
            InstallStatus(engine=name, version=t.source.version, step=t.step,
                          done_bytes=min(max(t.done_bytes, 0), COUNT_MAX),
                          total_bytes=None if t.total_bytes is None else min(max(t.total_bytes, 0), COUNT_MAX))
            for name, t in sorted(self.tracks.items()) if t.task is not None
        ]

    async def close(self) -> None:
        tasks = [task for t in self.tracks.values() for task in (t.task, t.check) if task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
