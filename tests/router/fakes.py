"""A stand-in for the control plane as the router sees it (router/state.py's interfaces, all of them: RouterState), so
router tests set up routes without reaching into the plane. Usage still lands in a real SQLite store."""

from __future__ import annotations

import asyncio

from llmgw.api.router import Admission, ModelExplanation, ReadyReplica, Wanted
from llmgw.config.server import ModelSpec
from llmgw.core.clock import Clock, FakeClock
from llmgw.router.keys import KeysWritten
from llmgw.router.stats import Recorder
from llmgw.store.base import AnyUsage, ApiKeyRecord
from llmgw.store.sqlite import SqliteStore
from llmgw.wire.messages import EngineLoad


class FakeState:
    """It keeps no limits: a key with limits is the control plane's to admit (tests/router/test_limits.py runs over
    it), and a test that gives one to this double fails instead of passing unlimited."""

    def __init__(self, models: list[ModelSpec], clock: FakeClock, store: SqliteStore) -> None:
        self.clock: Clock = clock  # the tests keep the FakeClock they gave it
        self.models = {m.name: m for m in models}
        self.store = store
        self._ready: dict[str, list[ReadyReplica]] = {}
        self._generation = 0
        self.demand: dict[str, float] = {}
        self.last_used: dict[str, float] = {}
        self.outstanding: dict[str, int] = {}  # what the router last said it has in flight, per replica
        self.engine_loads: dict[str, EngineLoad] = {}  # what a test says the engines report
        self.ejections: list[tuple[str, str]] = []
        self.ready_estimates: dict[str, float] = {}  # what a test says each model takes to become ready

    # what a test arranges
    def put_ready(self, rid: str, model: str, endpoint: str, secret: str = "",
                  closes_after_stream: bool = False) -> None:
        self.remove(rid)
        self._ready.setdefault(model, []).append(ReadyReplica(id=rid, endpoint=endpoint, secret=secret,
                                                              closes_after_stream=closes_after_stream))
        self._generation += 1

    def remove(self, rid: str) -> None:
        for model, reps in self._ready.items():
            self._ready[model] = [r for r in reps if r.id != rid]
        self._generation += 1

    # KeyVersions
    def keys_version(self) -> int:
        return 0  # tests reload the key ring themselves

    def keys_since(self, version: int) -> KeysWritten | None:
        return None  # what a test writes to the store is read from there

    # Readiness
    def generation(self) -> int:
        return self._generation

    def ready(self) -> dict[str, list[ReadyReplica]]:
        return {m: list(reps) for m, reps in self._ready.items() if reps}

    def ready_seconds(self, model: str) -> float | None:
        return self.ready_estimates.get(model)

    def not_answering(self) -> dict[str, str]:
        return {}  # the real control plane's word on it: tests/router/test_model_not_answering.py

    def want(self, model: str) -> None:
        self.demand[model] = self.clock.now()

    async def explain(self, model: str) -> ModelExplanation | None:
        spec = self.models.get(model)
        if spec is None:
            return ModelExplanation(model=model, wanted=Wanted.Unknown)
        return ModelExplanation(model=model, wanted=Wanted.NotWanted, min=spec.scaling.min, max=spec.scaling.max,
                                on_demand=spec.on_demand)

    # EngineLoads
    def loads(self) -> dict[str, EngineLoad]:
        return self.engine_loads

    # ReplicaUse
    def used(self, replica_id: str, at: float, outstanding: int) -> None:
        self.last_used[replica_id] = at
        if outstanding > 0:
            self.outstanding[replica_id] = outstanding
        else:
            self.outstanding.pop(replica_id, None)

    def ejected(self, replica_id: str, words: str) -> None:
        self.ejections.append((replica_id, words))

    # LimitTickets
    async def admit(self, key: ApiKeyRecord, cost: int, model: str = "") -> Admission:
        raise AssertionError(f"key {key.id} has limits: FakeState keeps none (test limits over the control plane)")

    def settle(self, ticket: str, used: int) -> None:
        raise AssertionError("FakeState admits nothing, so it has nothing to settle")

    # RouterState's own
    def stale_for(self) -> float:
        return 0.0  # its table is whatever the test set: never in doubt

    def attach(self, recorder: Recorder) -> None:
        self.recorder = recorder

    async def store_usage(self, batch: list[AnyUsage]) -> None:
        await asyncio.to_thread(self.store.add_usage, batch)

    async def flush(self) -> None:
        pass
