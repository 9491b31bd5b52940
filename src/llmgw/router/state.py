"""What the router needs from the control plane: one small interface per stage that asks, and RouterState, all of
them, which the router is built over and hands out a part of to each stage.

control.http.local_state.LocalState serves the router in the control plane's own process, through the plane's named
operations. RemoteState serves a router worker process: it polls the management API for the routing table and posts
back what the control plane must know (demand, use, requests in flight, usage), so several workers can share one
port. Both implement every interface here, as does the router tests' double (tests/router/fakes.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
from typing import Protocol
from urllib.parse import quote

import aiohttp
from pydantic import ValidationError

from llmgw.api.router import ActivityReport, Admission, AdmitRequest, ModelExplanation, ReadyReplica, RouterView
from llmgw.config.server import ModelSpec
from llmgw.core.clock import Clock
from llmgw.router.keys import KeysWritten
from llmgw.router.stats import Recorder
from llmgw.store.base import AnyUsage, ApiKeyRecord, Usage
from llmgw.wire.messages import EngineLoad

log = logging.getLogger(__name__)

USAGE_POST_TIMEOUT = 60.0
POLL_SLACK_S = 5.0  # polls come every fraction of a second: a view younger than this is current


class KeyVersions(Protocol):
    """Authenticate (auth.py): whether the API keys changed since the router read them, and the keys this process
    wrote since a version (made, changed, revoked: known without a store read), or None when they must be read."""

    def keys_version(self) -> int: ...
    def keys_since(self, version: int) -> KeysWritten | None: ...


class Readiness(Protocol):
    """Wait for a ready replica (waiting.py): which replicas are ready, why none answers, why none is ready yet, and
    a model asked for (loaded on demand)."""

    clock: Clock

    def generation(self) -> int: ...  # of the routing table: a new one means `ready` changed
    def ready(self) -> dict[str, list[ReadyReplica]]: ...
    def not_answering(self) -> dict[str, str]: ...  # model -> why, where every replica stopped answering
    def ready_seconds(self, model: str) -> float | None: ...  # its measured way to ready (load or wake); None: unknown
    def want(self, model: str) -> None: ...
    async def explain(self, model: str) -> ModelExplanation | None: ...


class EngineLoads(Protocol):
    """Choose (choice.py): the engines' own gauges, as their agents last reported them."""

    clock: Clock

    def loads(self) -> dict[str, EngineLoad]: ...  # replica id -> its engine's own gauges


class ReplicaUse(Protocol):
    """Forward (dispatch.py): what the control plane must know of the replicas a request used."""

    clock: Clock

    def used(self, replica_id: str, at: float, outstanding: int) -> None: ...
    def ejected(self, replica_id: str, words: str) -> None: ...  # a replica left out of routing, and why


class LimitTickets(Protocol):
    """Admit (app.py) and end (ending.py): tenant limits, kept in the control plane's process for every router
    process (control/tenants/limit_counters.py)."""

    async def admit(self, key: ApiKeyRecord, cost: int, model: str = "") -> Admission: ...
    def settle(self, ticket: str, used: int) -> None: ...


class RouterState(KeyVersions, Readiness, EngineLoads, ReplicaUse, LimitTickets, Protocol):
    """Every stage's interface, and what the router (app.py) uses itself: the catalog, whether its routing table is
    current, and where its statistics and usage go."""

    models: dict[str, ModelSpec]

    def stale_for(self) -> float: ...  # seconds the routing table has gone unconfirmed
    def attach(self, recorder: Recorder) -> None: ...
    async def store_usage(self, batch: list[AnyUsage]) -> None: ...
    async def flush(self) -> None: ...


class RemoteState:
    """A router worker's view, kept by polling the management API (on loopback beside the control plane)."""

    def __init__(self, admin: str, clock: Clock, token: str) -> None:
        self.admin = admin.rstrip("/")
        self.clock = clock
        self._auth = {"Authorization": f"Bearer {token}"}
        self.models: dict[str, ModelSpec] = {}
        self._view = RouterView(generation=-1, keys_version=-1, models=[], ready={})
        self._activity = ActivityReport()
        self._in_flight: dict[str, int] = {}  # sent whole with every report: the plane replaces ours with it
        self._session: aiohttp.ClientSession | None = None
        self._recorder: Recorder | None = None
        self._reported = -1  # the recorder's version at the last report that arrived
        self._settled: list[tuple[str, int]] = []
        self._polled_at: float | None = None  # monotonic time of the last view it got

    def attach(self, recorder: Recorder) -> None:
        self._recorder = recorder

    def ejected(self, replica_id: str, words: str) -> None:
        pass  # this worker's own routing; its log says it (the control plane's router records an event)

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5), headers=self._auth)
        return self._session

    def stale_for(self) -> float:
        """Its control plane's own doubt at the last poll, and the time since (a worker that cannot poll doubts)."""
        since = self.clock.monotonic() - self._polled_at if self._polled_at is not None else 0.0
        return self._view.stale_for + since if self._view.stale_for else max(0.0, since - POLL_SLACK_S)

    async def poll(self) -> None:
        async with self._http().get(self.admin + "/api/router/view") as r:
            r.raise_for_status()
            view = RouterView.model_validate_json(await r.read())
        self._polled_at = self.clock.monotonic()
        if view.generation != self._view.generation or view.models != list(self.models.values()):
            self.models.clear()
            self.models.update({m.name: m for m in view.models})
        self._view = view

    def generation(self) -> int:
        return self._view.generation

    def keys_version(self) -> int:
        return self._view.keys_version

    def keys_since(self, version: int) -> KeysWritten | None:
        return None  # the control plane wrote them, in another process: read from the store

    def ready(self) -> dict[str, list[ReadyReplica]]:
        return self._view.ready

    def not_answering(self) -> dict[str, str]:
        return self._view.not_answering

    def ready_seconds(self, model: str) -> float | None:
        return self._view.ready_seconds.get(model)

    def loads(self) -> dict[str, EngineLoad]:
        return self._view.loads

    def want(self, model: str) -> None:
        self._activity.demand[model] = self.clock.now()
        asyncio.get_running_loop().create_task(self.flush())  # a load should start now, not at the next flush

    def used(self, replica_id: str, at: float, outstanding: int) -> None:
        self._activity.used[replica_id] = at
        if outstanding > 0:
            self._in_flight[replica_id] = outstanding
        else:
            self._in_flight.pop(replica_id, None)

    async def admit(self, key: ApiKeyRecord, cost: int, model: str = "") -> Admission:
        """Asked of the control plane, which keeps every process's counters; refused when it cannot be asked (a
        limit that cannot be checked is not one to wave through). The ticket is chosen here, so an admission whose
        answer is lost is released (settled at 0) rather than holding the key's slot until it expires."""
        ticket = secrets.token_hex(16)
        try:
            async with self._http().post(
                self.admin + "/api/router/admit",
                data=AdmitRequest(key_id=key.id, cost=cost, ticket=ticket, model=model).model_dump_json(),
                headers={"Content-Type": "application/json"},
            ) as r:
                r.raise_for_status()
                return Admission.model_validate_json(await r.read())
        except (aiohttp.ClientError, TimeoutError, ValidationError) as e:
            self.settle(ticket, 0)  # if it was admitted, that ends; if it arrives later, it is refused
            return Admission(admitted=False, refusal="limits_unavailable", retry_after=1.0,
                             message=f"this key's limits cannot be checked now (the control plane: {e})")

    def settle(self, ticket: str, used: int) -> None:
        self._settled.append((ticket, used))
        asyncio.get_running_loop().create_task(self.flush())  # a freed slot should be free now

    async def store_usage(self, batch: list[AnyUsage]) -> None:
        """Raises unless the control plane recorded the batch (it answers 2xx only once it is in the store)."""
        records = [u.record() if isinstance(u, Usage) else u for u in batch]
        async with self._http().post(
            self.admin + "/api/router/activity",
            data=ActivityReport(usage=records).model_dump_json(),
            headers={"Content-Type": "application/json"},
            timeout=aiohttp.ClientTimeout(total=USAGE_POST_TIMEOUT),  # a batch waits for the store's writer
        ) as r:
            r.raise_for_status()

    async def explain(self, model: str) -> ModelExplanation | None:
        try:
            async with self._http().get(f"{self.admin}/api/explain/{quote(model, safe='')}") as r:
                r.raise_for_status()
                return ModelExplanation.model_validate_json(await r.read())
        except (aiohttp.ClientError, TimeoutError, ValidationError):
            return None

    async def flush(self) -> None:
        act, self._activity = self._activity, ActivityReport()
        rec = self._recorder
        version = rec.version if rec is not None else -1
        act.settled, self._settled = self._settled, []
        if not (act.demand or act.used or self._in_flight or act.settled or version != self._reported):
            return  # busy and quiet is still busy: say so
        act.reporter, act.outstanding = f"worker-{os.getpid()}", dict(self._in_flight)
        if rec is not None:
            act.stats = rec.snapshot()
        try:
            async with self._http().post(
                self.admin + "/api/router/activity",
                data=act.model_dump_json(),
                headers={"Content-Type": "application/json"},
            ) as r:
                r.raise_for_status()
            self._reported = version
        except (aiohttp.ClientError, TimeoutError) as e:
            log.warning("could not report activity to the control plane: %s (kept for the next flush)", e)
            act.demand.update(self._activity.demand)
            act.used.update(self._activity.used)
            self._settled = act.settled + self._settled
            self._activity = act

    async def close(self) -> None:
        await self.flush()
        if self._session is not None:
            await self._session.close()
