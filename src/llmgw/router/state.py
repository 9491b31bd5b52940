"""What the router needs from the control plane, behind one small interface.

LocalState reads the control plane in the same process. RemoteState serves a router worker process: it
polls the management API for the routing table and posts back what the control plane must know (demand,
use, requests in flight, usage), so several workers can share one port.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Protocol
from urllib.parse import quote

import aiohttp
from pydantic import BaseModel

from llmgw.config.server import ModelSpec
from llmgw.control.plane import LOCAL, ControlPlane
from llmgw.core.clock import Clock
from llmgw.store.base import UsageRecord

log = logging.getLogger(__name__)

USAGE_POST_TIMEOUT = 60.0
Ready = tuple[str, str, str]  # replica id, endpoint, the replica's engine secret


class RouterView(BaseModel):
    """The routing table as the management API hands it to router workers."""

    generation: int
    keys_version: int
    models: list[ModelSpec]
    ready: dict[str, list[Ready]]


class Activity(BaseModel):
    """What router workers tell the control plane: demand and use keep models alive; usage is recorded."""

    reporter: str = ""  # which worker: its in-flight table replaces its previous one, and adds to the others'
    demand: dict[str, float] = {}
    used: dict[str, float] = {}
    outstanding: dict[str, int] = {}  # the worker's whole in-flight table
    usage: list[UsageRecord] = []


class RouterState(Protocol):
    clock: Clock
    models: dict[str, ModelSpec]

    def generation(self) -> int: ...
    def keys_version(self) -> int: ...
    def ready(self) -> dict[str, list[Ready]]: ...
    def want(self, model: str) -> None: ...
    def used(self, replica_id: str, at: float, outstanding: int) -> None: ...
    async def store_usage(self, batch: list[UsageRecord]) -> None: ...
    async def explain(self, model: str) -> list[str]: ...
    async def flush(self) -> None: ...


def ready_table(plane: ControlPlane) -> dict[str, list[Ready]]:
    ready: dict[str, list[Ready]] = {}
    for r in plane.replicas.values():
        if r.ready and r.endpoint:
            ready.setdefault(r.model, []).append((r.id, r.endpoint, r.secret))
    return ready


class LocalState:
    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.clock = plane.clock
        self.models = plane.models

    def generation(self) -> int:
        return self.plane.generation

    def keys_version(self) -> int:
        return self.plane.keys_version

    def ready(self) -> dict[str, list[Ready]]:
        return ready_table(self.plane)

    def want(self, model: str) -> None:
        self.plane.want(model)

    def used(self, replica_id: str, at: float, outstanding: int) -> None:
        self.plane.used(replica_id, at)
        self.plane.in_flight(LOCAL, {replica_id: outstanding}, whole=False)

    async def store_usage(self, batch: list[UsageRecord]) -> None:
        # off the event loop, through the one writer: a batch is one transaction, but a disk can still stall
        await self.plane.writer.run(self.plane.store.add_usage, batch)

    async def explain(self, model: str) -> list[str]:
        return self.plane.explain(model)

    async def flush(self) -> None:
        pass  # demand and use are already the control plane's: it is in this process


class RemoteState:
    """A router worker's view, kept by polling the management API (on loopback beside the control plane)."""

    def __init__(self, admin: str, clock: Clock, token: str) -> None:
        self.admin = admin.rstrip("/")
        self.clock = clock
        self._auth = {"Authorization": f"Bearer {token}"}
        self.models: dict[str, ModelSpec] = {}
        self._view = RouterView(generation=-1, keys_version=-1, models=[], ready={})
        self._activity = Activity()
        self._in_flight: dict[str, int] = {}  # sent whole with every report: the plane replaces ours with it
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5), headers=self._auth)
        return self._session

    async def poll(self) -> None:
        async with self._http().get(self.admin + "/api/router/view") as r:
            r.raise_for_status()
            view = RouterView.model_validate_json(await r.read())
        if view.generation != self._view.generation or view.models != list(self.models.values()):
            self.models.clear()
            self.models.update({m.name: m for m in view.models})
        self._view = view

    def generation(self) -> int:
        return self._view.generation

    def keys_version(self) -> int:
        return self._view.keys_version

    def ready(self) -> dict[str, list[Ready]]:
        return self._view.ready

    def want(self, model: str) -> None:
        self._activity.demand[model] = self.clock.now()
        asyncio.get_running_loop().create_task(self.flush())  # a load should start now, not at the next flush

    def used(self, replica_id: str, at: float, outstanding: int) -> None:
        self._activity.used[replica_id] = at
        if outstanding > 0:
            self._in_flight[replica_id] = outstanding
        else:
            self._in_flight.pop(replica_id, None)

    async def store_usage(self, batch: list[UsageRecord]) -> None:
        """Raises unless the control plane recorded the batch (it answers 2xx only once it is in the store)."""
        async with self._http().post(
            self.admin + "/api/router/activity",
            data=Activity(usage=batch).model_dump_json(),
            headers={"Content-Type": "application/json"},
            timeout=aiohttp.ClientTimeout(total=USAGE_POST_TIMEOUT),  # a batch waits for the store's writer
        ) as r:
            r.raise_for_status()

    async def explain(self, model: str) -> list[str]:
        try:
            async with self._http().get(f"{self.admin}/api/explain/{quote(model, safe='')}") as r:
                return list((await r.json())["lines"])
        except (aiohttp.ClientError, TimeoutError, KeyError, ValueError):
            return []

    async def flush(self) -> None:
        act, self._activity = self._activity, Activity()
        if not (act.demand or act.used or self._in_flight):  # busy and quiet is still busy: say so
            return
        act.reporter, act.outstanding = f"worker-{os.getpid()}", dict(self._in_flight)
        try:
            async with self._http().post(
                self.admin + "/api/router/activity",
                data=act.model_dump_json(),
                headers={"Content-Type": "application/json"},
            ) as r:
                r.raise_for_status()
        except (aiohttp.ClientError, TimeoutError) as e:
            log.warning("could not report activity to the control plane: %s (kept for the next flush)", e)
            act.demand.update(self._activity.demand)
            act.used.update(self._activity.used)
            self._activity = act

    async def close(self) -> None:
        await self.flush()
        if self._session is not None:
            await self._session.close()
