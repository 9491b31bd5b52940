"""The hub models' owner: every catalog model named `hf://org/name[@revision]` resolved to one commit and its files,
or why not (a HubState per model). A resolution is sticky: the commit stays until the catalog names another source
for the model or its nodes report that the hub no longer has the commit (RevisionGone). Servers sharing a store
agree on the commit: the first one written there is the one every server uses (`ResolutionStore`).

The hub is asked in a thread (its library blocks), never on the event loop, with back-off while it fails.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from llmgw.config.server import HubConfig, ModelSpec
from llmgw.core.backoff import doubling
from llmgw.core.clock import Clock
from llmgw.core.errors import HubFailed, StoreError
from llmgw.core.reasons import Reason
from llmgw.wire.hub import HubRef, HubState, Resolution, is_hub, parse_hub, resolve_base
from llmgw.wire.messages import NodeReport, WeightsPlan

Resolver = Callable[[HubRef, str, "str | None", float], Resolution]
RETRY_BASE = 5.0  # seconds before the second try of a failed resolution, doubling up to RETRY_CAP
RETRY_CAP = 300.0
TIMEOUT = 30.0  # one resolution's bound, the hub's answers together
TOKEN_MAX = 4096  # bytes of the token file read: a token is a few dozen

log = logging.getLogger(__name__)


def hub_resolve(ref: HubRef, endpoint: str, token: str | None, timeout: float) -> Resolution:
    """The hub's own resolver (control/hub/hub.py), imported on the first resolution: huggingface_hub is slow to load,
    and a control plane whose catalog names no hub model never needs it."""
    from llmgw.control.hub import hub

    return hub.resolve(ref, endpoint, token, timeout)


class ResolutionStore(Protocol):
    """Where servers sharing a store agree on resolutions: `claim` keeps the first written for a source and returns
    the one kept; `drop` removes one only while it still names that commit."""

    def get_resolution(self, source: str) -> Resolution | None: ...
    def claim_resolution(self, source: str, resolution: Resolution) -> Resolution: ...
    def drop_resolution(self, source: str, commit: str) -> None: ...


@dataclass
class _Entry:
    state: HubState
    tries: int = 0  # failures in a row
    due: float = 0.0  # the injected clock's time of the next try
    gone: str = ""  # a commit nodes reported gone: dropped from the store before the next try
    plan: WeightsPlan | None = None  # what every node's plan for the resolution starts from
    # while the commit nodes reported gone is resolved again, the one its running replicas keep (and its plan):
    # nothing served changes until there is a new commit to move to
    last: Resolution | None = None

    @property
    def current(self) -> Resolution | None:
        return self.state.resolution or self.last


def read_token(path: str | Path | None) -> tuple[str | None, str]:
    """The hub token in `path`, or None and why not (words an operator can act on). A token others can read is
    refused, as the operator token is."""
    if path is None:
        return None, "no hub.token_file is configured"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            mode = stat.S_IMODE(os.fstat(fd).st_mode)
            raw = os.read(fd, TOKEN_MAX + 1)
        finally:
            os.close(fd)
    except OSError as e:
        return None, f"cannot read the hub token file {path}: {e.strerror or e}"
    if mode & 0o077:
        return None, f"the hub token file {path} is readable by others (mode {mode:o}): chmod 600 it"
    token = raw.decode(errors="replace").strip()
    if len(raw) > TOKEN_MAX or not token or not token.isprintable() or " " in token:
        return None, f"the hub token file {path} does not hold one token"
    return token, ""


class HubModels:
    def __init__(self, cfg: HubConfig, clock: Clock, resolver: Resolver, store: ResolutionStore | None = None,
                 timeout: float = TIMEOUT) -> None:
        self.cfg = cfg
        self.clock = clock
        self._resolve = resolver
        self._store = store
        self._timeout = timeout
        self._entries: dict[str, _Entry] = {}  # model name -> what is known of its source
        self._token: str | None = None  # as last read (each tick): handed to nodes for gated repositories
        self.wake = asyncio.Event()  # a model's resolution is wanted before its back-off ends (a commit gone)
        # bumped when what pinned() or plans() return may have changed: a node's desired state derived before is stale
        self.version = 0

    @property
    def states(self) -> dict[str, HubState]:
        """Per hub model of the catalog: its resolution, or the reason and words of why there is none."""
        return {name: e.state for name, e in self._entries.items()}

    def sync(self, models: Mapping[str, ModelSpec]) -> None:
        """Follow the catalog: a hub model new or named by another source is resolving from now; one that left is
        forgotten."""
        now = self.clock.now()
        for name, spec in models.items():
            e = self._entries.get(name)
            if is_hub(spec.source) and (e is None or e.state.source != spec.source):
                self._entries[name] = _Entry(_resolving(spec.source, now, "not asked yet"), due=now)
                self.version += 1
        for name in [n for n in self._entries if n not in models or not is_hub(models[n].source)]:
            del self._entries[name]
            self.version += 1

    async def tick(self, models: Mapping[str, ModelSpec]) -> float:
        """Resolve every model that is due (one at a time: the hub limits its callers); the seconds until the next
        is due (RETRY_CAP when none is waiting)."""
        self.sync(models)
        if self._entries:  # a token replaced or removed (revoked) reaches the nodes without resolving anything again
            self._set_token((await asyncio.to_thread(read_token, self.cfg.token_file))[0])
        for name in list(self._entries):
            e = self._entries.get(name)
            if e is not None and e.state.resolution is None and e.due <= self.clock.now():
                await self._try(name, e)
        waits = [e.due - self.clock.now() for e in self._entries.values() if e.state.resolution is None]
        return max(0.0, min(waits, default=RETRY_CAP))

    async def _try(self, name: str, e: _Entry) -> None:
        source = e.state.source
        try:
            got = await asyncio.to_thread(self._resolve_once, source, e.gone)
        except StoreError as err:  # the servers sharing it could not agree on a commit: tried again, backing off
            f = HubFailed(Reason.HubResolving, f"the store, where servers agree on the commit, failed: {err}")
            self._failed(name, e, source, f)
            return
        except HubFailed as f:
            self._failed(name, e, source, f)
            return
        except Exception as err:  # a resolver's surprise fails this model, backing off; the others still resolve
            log.exception("resolving %s failed", source)
            words = f"resolving failed: {type(err).__name__}: {err}"[:400]
            self._failed(name, e, source, HubFailed(Reason.HubUnreachable, words))
            return
        if self._set(name, e, HubState(source, got, since=self.clock.now())):
            e.tries, e.gone, e.last = 0, "", None
            e.plan = WeightsPlan(size=got.total_bytes, files=list(got.files),
                                 base_url=resolve_base(self.cfg.endpoint, got.repo, got.commit))
            self.version += 1

    def _failed(self, name: str, e: _Entry, source: str, f: HubFailed) -> None:
        e.tries += 1
        now = self.clock.now()
        e.due = now + doubling(RETRY_BASE, RETRY_CAP, e.tries - 1)
        self._set(name, e, replace(e.state, reason=f.reason, message=f"{source}: {f}", since=now))

    def _set(self, name: str, e: _Entry, state: HubState) -> bool:
        if self._entries.get(name) is not e or e.state.source != state.source:  # the catalog moved meanwhile
            return False
        e.state = state
        self.version += 1
        return True

    def _set_token(self, token: str | None) -> None:
        if token != self._token:
            self._token = token
            self.version += 1

    def _resolve_once(self, source: str, gone: str) -> Resolution:
        """In a worker thread: the store's resolution when another server (or this one, before a restart) made one;
        else the hub's answer, kept in the store unless another server's got there first."""
        token, why = read_token(self.cfg.token_file)
        self._token = token  # in a worker thread: the version moves with the resolution this is for (_set)
        store = self._store
        if store is not None:
            if gone:
                store.drop_resolution(source, gone)
            kept = store.get_resolution(source)
            if kept is not None and kept.commit != gone:
                return kept
        try:
            got = self._resolve(parse_hub(source), self.cfg.endpoint, token, self._timeout)
        except HubFailed as f:
            if f.reason == Reason.HubAccessDenied and why:
                raise HubFailed(f.reason, f"{f} ({why})") from None
            raise
        return store.claim_resolution(source, got) if store is not None else got

    def revision_gone(self, report: NodeReport) -> None:
        """A node reports a fetch failed because the hub no longer has the commit: the model is resolved again (not
        sooner than RETRY_BASE after its last resolution, however many nodes say so)."""
        gone = {f.source for f in report.fetches if f.state == "failed" and f.reason == Reason.RevisionGone}
        if not gone:
            return
        now = self.clock.now()
        for e in self._entries.values():
            res = e.state.resolution
            if res is not None and res.source in gone and now - e.state.since >= RETRY_BASE:
                words = f"{e.state.source}: commit {res.commit} is no longer on the hub; resolving the revision again"
                e.state = HubState(e.state.source, None, Reason.HubResolving, words, now)
                e.gone, e.due, e.tries, e.last = res.commit, now, 0, res
                self.version += 1
                self.wake.set()

    def resolutions(self) -> dict[str, Resolution]:
        """Per model name, its resolution (only the resolved ones)."""
        return {n: e.state.resolution for n, e in self._entries.items() if e.state.resolution is not None}

    def pinned(self, models: dict[str, ModelSpec]) -> dict[str, ModelSpec]:
        """The catalog as nodes and placement see it: a resolved hub model's source is its pinned source
        (hf://org/name@<commit>; while a commit gone is resolved again, the last one); every other model as it is."""
        got = {n: res for n, e in self._entries.items() if (res := e.current) is not None}
        if not got:
            return models
        out = dict(models)
        for name, res in got.items():
            spec = models.get(name)
            if spec is not None and spec.source == self._entries[name].state.source:
                out[name] = spec.model_copy(update={"source": res.source})
        return out

    def unresolved(self, models: Mapping[str, ModelSpec]) -> dict[str, tuple[Reason, str]]:
        """Per hub model not resolved yet: its reason and words (HubResolving before the first answer)."""
        now = self.clock.now()
        out: dict[str, tuple[Reason, str]] = {}
        for name, spec in models.items():
            if not is_hub(spec.source):
                continue
            e = self._entries.get(name)
            if e is None or e.state.source != spec.source:
                out[name] = (Reason.HubResolving, _resolving(spec.source, now, "not asked yet").message)
            elif e.state.resolution is None:
                code = e.state.reason
                out[name] = (Reason(code) if code in Reason.__members__ else Reason.HubResolving, e.state.message)
        return out

    def plans(self) -> dict[str, WeightsPlan]:
        """Per pinned source, what every node's plan for it starts from: the files, where they are fetched from and
        the token when the repository needs one (only then)."""
        return {res.source: e.plan.model_copy(update={"token": self._token or ""}) if res.gated else e.plan
                for e in self._entries.values() if (res := e.current) is not None and e.plan is not None}


def _resolving(source: str, now: float, words: str) -> HubState:
    return HubState(source, None, Reason.HubResolving, f"{source}: resolving the revision ({words})", now)
