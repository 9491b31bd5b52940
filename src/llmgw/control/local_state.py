"""The router in the control plane's own process: it reads the plane and writes only through its named operations."""

from __future__ import annotations

from llmgw.config.server import ModelSpec
from llmgw.control.plane import ControlPlane
from llmgw.core.clock import Clock
from llmgw.core.state import not_answering
from llmgw.router.stats import Recorder
from llmgw.store.base import AnyUsage, ApiKeyRecord
from llmgw.wire.messages import EngineLoad
from llmgw.wire.router import Admission, ModelExplanation, ReadyReplica


class LocalState:
    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.clock: Clock = plane.clock
        self.models: dict[str, ModelSpec] = plane.models

    def generation(self) -> int:
        return self.plane.generation

    def stale_for(self) -> float:
        return self.plane.table_stale_for()

    def keys_version(self) -> int:
        return self.plane.keys_version

    def ready(self) -> dict[str, list[ReadyReplica]]:
        return self.plane.ready_table()

    def not_answering(self) -> dict[str, str]:
        return not_answering(self.plane.replicas.values())

    def loads(self) -> dict[str, EngineLoad]:
        return self.plane.engine_loads

    def want(self, model: str) -> None:
        self.plane.want(model)

    def used(self, replica_id: str, at: float, outstanding: int) -> None:
        self.plane.used_here(replica_id, at, outstanding)

    async def store_usage(self, batch: list[AnyUsage]) -> None:
        # off the event loop, through the one writer: a batch is one transaction, but a disk can still stall
        await self.plane.record_usage(batch)

    async def explain(self, model: str) -> ModelExplanation | None:
        return self.plane.explain(model)

    def ejected(self, replica_id: str, words: str) -> None:
        self.plane.event("replica", replica_id, f"replica {replica_id} {words}")

    def attach(self, recorder: Recorder) -> None:
        self.plane.attach_router(recorder.snapshot)

    async def flush(self) -> None:
        pass  # demand and use are already the control plane's: it is in this process

    async def admit(self, key: ApiKeyRecord, cost: int) -> Admission:
        return self.plane.quotas.admission(key, cost)

    def settle(self, ticket: str, used: int) -> None:
        self.plane.quotas.settle(ticket, used)
