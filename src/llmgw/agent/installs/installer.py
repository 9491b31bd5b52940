"""Converge a node on the engines its control plane names. Level-triggered: converge() is called every pass and
starts, at most once per engine, an install that runs in the background while the agent goes on reporting.

What the node reports of each engine it was told to have: the build it installed and saw run (re-checked every ten
minutes: an unrelated upgrade can remove a library), or the install under way in its own words, or why the last
attempt failed (retried after a minute, backing off to ten). A build is never reported because it is on disk.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from llmgw.agent.engines import ADAPTERS
from llmgw.agent.installs.probe import probe
from llmgw.agent.installs.recipes import MARKER, Context, build_dir, install, read_marker
from llmgw.core.errors import InstallRefused
from llmgw.core.reasons import Reason
from llmgw.wire.engines import EngineSource, EngineVariant, choose_variant
from llmgw.wire.messages import EngineStatus, Hardware

log = logging.getLogger(__name__)

RECHECK_S = 600.0
RETRY_FIRST_S = 60.0
RETRY_MAX_S = 600.0
WANTED_FILE = "wanted.json"


@dataclass
class Track:
    """One engine this node was told to have."""

    source: EngineSource
    variant: EngineVariant | None = None
    note: str = ""  # why this build (a driver with no CUDA build), or why none fits
    status: EngineStatus | None = None  # the installed build as last checked
    checked_at: float = float("-inf")
    progress: str = ""
    failure: tuple[str, str] | None = None  # (reason, words) of the last failed attempt
    failures: int = 0
    retry_at: float = float("-inf")
    task: asyncio.Task[None] | None = field(default=None, repr=False)  # an install under way
    check: asyncio.Task[None] | None = field(default=None, repr=False)  # a re-check under way (vLLM's takes 20 s)


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
            data = json.loads((self.ctx.root / WANTED_FILE).read_text())
            return [EngineSource.model_validate(d) for d in data]
        except (OSError, ValueError):
            return []

    def _save_wanted(self, sources: list[EngineSource]) -> None:
        self.ctx.root.mkdir(parents=True, exist_ok=True)
        tmp = self.ctx.root / (WANTED_FILE + ".tmp")
        tmp.write_text(json.dumps([s.model_dump(mode="json") for s in sources]))
        os.replace(tmp, self.ctx.root / WANTED_FILE)

    async def converge(self, sources: list[EngineSource], hw: Hardware, in_use: set[Path]) -> None:
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
            t.variant, t.note = choose_variant(s, hw.arch, hw.nvidia_driver)
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
            if t.check is None and (t.status is None or not t.status.runs) and now >= t.retry_at:
                t.task = asyncio.create_task(self._attempt(t))
        self.settled = True
        self._remove_unused(in_use)

    async def _installed(self, s: EngineSource, v: EngineVariant) -> EngineStatus | None:
        """This build as found on disk: marked installed, and seen to run now."""
        d = build_dir(self.ctx.root, s, v)
        marker = read_marker(d)
        if marker is None:
            return None
        return await probe(s.name, str(d / marker["executable"]))

    async def _recheck(self, t: Track, path: str) -> None:
        try:
            status = await probe(t.source.name, path)
            if t.task is None:  # an install that started meanwhile reports for itself
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

        say(f"installing {s.name} {s.version} ({v.variant})")
        try:
            t.status = await install(self.ctx, s, v, say)
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

    def _failed(self, t: Track, reason: str, words: str) -> None:
        t.failures += 1
        delay = min(RETRY_MAX_S, RETRY_FIRST_S * 2 ** (t.failures - 1))
        t.retry_at = self.ctx.clock.monotonic() + delay
        t.failure = (reason, words[:1800])
        log.error("installing %s %s failed (next attempt in %.0fs): %s", t.source.name, t.source.version, delay, words)

    def _cancel(self, t: Track) -> None:
        for task in (t.task, t.check):
            if task is not None:
                task.cancel()

    def _remove_unused(self, in_use: set[Path]) -> None:
        """Builds of a version no longer wanted, once no shard runs from them. Never one being installed."""
        for engine_dir in (self.ctx.root / n for n in ADAPTERS):
            if not engine_dir.is_dir():
                continue
            t = self.tracks.get(engine_dir.name)
            keep = {build_dir(self.ctx.root, t.source, t.variant)} if t and t.variant else set()
            busy = t is not None and t.task is not None
            for d in engine_dir.iterdir():
                if d in keep or busy or not d.is_dir() or not (d / MARKER).exists():
                    continue
                if any(p == d or d in p.parents for p in in_use):
                    continue
                log.info("removing %s: no longer wanted and no shard runs from it", d)
                shutil.rmtree(d, ignore_errors=True)

    # -- what the node reports ----------------------------------------------------------------------------------

    def statuses(self) -> list[EngineStatus]:
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
            elif t.failure is not None:
                reason, words = t.failure
                out.append(EngineStatus(name=name, version=s.version, runs=False, reason=reason,
                                        message=f"install failed: {words}"))
            elif t.status is not None:
                out.append(t.status)
        return out

    def progress(self) -> list[str]:
        return [t.progress for t in self.tracks.values() if t.task is not None and t.progress]

    async def close(self) -> None:
        tasks = [task for t in self.tracks.values() for task in (t.task, t.check) if task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
