"""What the router and the control plane exchange: the routing table, the activity routers report, and why a model
has no replica. Neither side's module: both import this one, so neither imports the other."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, Field

from llmgw.api.model_weights import ModelWeights, weights_lines
from llmgw.api.stats import RouterStats
from llmgw.config.server import ModelSpec
from llmgw.core.conditions import Condition, ConditionType
from llmgw.core.explanation import Explanation, explanation_lines
from llmgw.records.state import Phase, StopRequest
from llmgw.store.base import UsageRecord
from llmgw.wire.messages import EngineLoad


class ReadyReplica(BaseModel):
    id: str
    endpoint: str
    secret: str  # the replica's engine secret: routers send it, nobody else has it
    closes_after_stream: bool = False  # open a fresh connection for each stream to it (its leading shard says)
    slots: int | None = None  # requests its engine runs at once (its leading shard says); None: not a fixed number


class RouterView(BaseModel):
    """The routing table as the management API hands it to router workers."""

    generation: int
    keys_version: int
    models: list[ModelSpec]
    ready: dict[str, list[ReadyReplica]]
    loads: dict[str, EngineLoad] = {}  # replica id -> its engine's own gauges, as last reported
    not_answering: dict[str, str] = {}  # model -> why, where every replica of it stopped answering (core.state)
    ready_seconds: dict[str, float] = {}  # model -> its longest measured way to ready (control/nodes/ready_times.py)
    stale_for: float = 0.0  # seconds the control plane has not been able to confirm this table (its store failing)


class ActivityReport(BaseModel):
    """What a router process tells the control plane: demand and use keep models alive; usage is recorded."""

    # which process: its in-flight table replaces its previous one, and adds to the others'
    reporter: Annotated[str, Field(max_length=128)] = ""
    demand: dict[str, float] = {}
    used: dict[str, float] = {}
    outstanding: dict[str, int] = {}  # the process's whole in-flight table
    usage: list[UsageRecord] = []
    stats: RouterStats | None = None  # the process's cumulative measurements (api/stats.py)
    # admitted requests that ended: (ticket, tokens used), settled against their key's limits
    # (control/tenants/limit_counters.py)
    settled: list[tuple[Annotated[str, Field(max_length=64)], Annotated[int, Field(ge=0, le=10**15)]]] = []


class AdmitRequest(BaseModel):
    """A router worker asks the control plane to admit one request of a key against the key's limits."""

    key_id: Annotated[str, Field(max_length=64)]
    cost: Annotated[int, Field(ge=0, le=10**15)]  # the tokens it reserves (core/limits.py reservation)
    model: Annotated[str, Field(max_length=256)] = ""  # the model it asks for: what GPU budgets reserve by
    # the ticket the worker chose, so it can release it when the answer is lost ("": the control plane chooses)
    ticket: Annotated[str, Field(max_length=64, pattern=r"^[A-Za-z0-9_.-]*$")] = ""


class Admission(BaseModel):
    """The answer: admitted with a ticket to settle, or refused and why (core/limits.py)."""

    admitted: bool
    refusal: str = ""  # rate_limit_exceeded | request_too_large | insufficient_quota
    message: str = ""
    retry_after: float | None = None
    headers: list[tuple[str, str]] = []  # x-ratelimit-*
    ticket: str = ""


class Wanted(StrEnum):
    Unknown = "unknown"  # not in the catalog
    Off = "off"  # scaling max is 0
    NotWanted = "not-wanted"  # min 0, on demand, nobody asked lately
    Replicas = "replicas"  # see the replicas


class ReplicaExplanation(BaseModel):
    id: str
    phase: Phase
    nodes: list[str]
    conditions: list[Condition]
    stop: StopRequest | None = None
    placement: Explanation | None = None  # the last placement decision: why it is where it is, or is nowhere


class ModelExplanation(BaseModel):
    """GET /api/explain/MODEL: why a model is or is not served, as data."""

    model: str
    wanted: Wanted
    min: int = 0
    max: int = 0
    on_demand: bool = False
    priority: int = 0  # who may take whose GPUs (config/serving.py): as configured, else by min
    pinned: bool = False  # never demoted nor preempted
    replicas: list[ReplicaExplanation] = []
    weights: ModelWeights | None = None  # a model whose nodes fetch its weights: resolved to what, and how far


def model_explanation_lines(e: ModelExplanation) -> list[str]:
    """Words for operators (ctl explain; a tenant's 503 says less: router/tenant_words.py). Nothing reads these back."""
    if e.wanted == Wanted.Unknown:
        return [f"{e.model}: not in the catalog"]
    weights = weights_lines(e.weights) if e.weights is not None else []
    first = [f"weights: {weights[0]}"] if e.weights is not None and not e.weights.resolved else []
    last = [f"weights: {weights[0]}", *("  " + ln for ln in weights[1:])] if weights and not first else []
    if e.wanted == Wanted.Off:
        return [f"{e.model}: configured and off (scaling max is 0)"]
    if e.wanted == Wanted.NotWanted:
        return [f"{e.model}: no replica wanted now (min {e.min}, on demand: {e.on_demand})", *first, *last]
    out: list[str] = first  # a source not resolved is why nothing can start: said first (a 503 shows two lines)
    if e.priority or e.pinned:
        out.append(f"{e.model}: priority {e.priority}" + (", pinned (never demoted nor preempted)" if e.pinned else ""))
    for r in e.replicas:
        kind = ConditionType.Scheduled if r.phase == Phase.Pending else ConditionType.Ready
        why = next((c for c in r.conditions if c.type == kind), None)
        out.append(f"replica {r.id}: {r.phase}" + (f" ({why.reason}: {why.message})" if why else ""))
        if r.stop is not None:
            out.append(f"  stop: {r.stop.reason}: {r.stop.message}")
        if r.placement is not None:
            out.extend("  " + ln for ln in explanation_lines(r.placement))
    return out + last
