"""The router in the control plane's own process: it reads the owners it is handed and writes only through their
named operations."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from llmgw.api.router import Admission, ModelExplanation, ReadyReplica
from llmgw.api.views import ReadyTime
from llmgw.config.server import ModelSpec
from llmgw.control.activity.activity import Activity
from llmgw.control.nodes.ready_times import longest_by_model
from llmgw.control.nodes.registry import Registry
from llmgw.control.storage.storage import Storage
from llmgw.control.tenants.credentials import Credentials
from llmgw.control.tenants.limit_counters import LimitCounters
from llmgw.core.clock import Clock
from llmgw.records.state import not_answering
from llmgw.router.keys import KeysWritten
from llmgw.router.stats import Recorder
from llmgw.store.base import AnyUsage, ApiKeyRecord
from llmgw.wire.messages import EngineLoad


class RouterSide:
    """The owners a router reads and tells, whether it runs in this process (LocalState) or in a worker process
    that asks over the management listener (control/http/router_api.py)."""

    def __init__(self, registry: Registry, activity: Activity, credentials: Credentials, limit_counters: LimitCounters,
                 storage: Storage, ready_times: Callable[[], Iterable[ReadyTime]] | None = None) -> None:
        self.registry = registry
        self.ready_times = ready_times  # read: each way to ready as measured (control/nodes/ready_times.py)
        self.activity = activity
        self.credentials = credentials
        self.limit_counters = limit_counters
        self.storage = storage


class LocalState(RouterSide):
    def __init__(self, registry: Registry, activity: Activity, credentials: Credentials, limit_counters: LimitCounters,
                 storage: Storage, ready_times: Callable[[], Iterable[ReadyTime]] | None = None) -> None:
        super().__init__(registry, activity, credentials, limit_counters, storage, ready_times)
        self.clock: Clock = storage.clock
        self.models: dict[str, ModelSpec] = registry.models

    def generation(self) -> int:
        return self.registry.generation

    def stale_for(self) -> float:
        return self.storage.stale_for()

    def keys_version(self) -> int:
        return self.credentials.keys_version

    def keys_since(self, version: int) -> KeysWritten | None:
        return self.credentials.keys_since(version)

    def ready(self) -> dict[str, list[ReadyReplica]]:
        return self.registry.ready_table()

    def not_answering(self) -> dict[str, str]:
        return not_answering(self.registry.replicas.values())

    def ready_seconds(self, model: str) -> float | None:
        return longest_by_model(self.ready_times()).get(model) if self.ready_times is not None else None

    def loads(self) -> dict[str, EngineLoad]:
        return self.activity.engine_loads

    def want(self, model: str) -> None:
        self.activity.want(model)

    def used(self, replica_id: str, at: float, outstanding: int) -> None:
        self.activity.used_here(replica_id, at, outstanding)

    async def store_usage(self, batch: list[AnyUsage]) -> None:
        # off the event loop, through the one writer: a batch is one transaction, but a disk can still stall
        await self.activity.record_usage(batch)

    async def explain(self, model: str) -> ModelExplanation | None:
        return self.registry.explain(model)

    def ejected(self, replica_id: str, words: str) -> None:
        self.storage.event("replica", replica_id, f"replica {replica_id} {words}")

    def attach(self, recorder: Recorder) -> None:
        self.activity.attach_router(recorder.snapshot)

    async def flush(self) -> None:
        pass  # demand and use are already the control plane's: it is in this process

    async def admit(self, key: ApiKeyRecord, cost: int, model: str = "") -> Admission:
        return self.limit_counters.admission(key, cost, model=model)

    def settle(self, ticket: str, used: int) -> None:
        self.limit_counters.settle(ticket, used)
