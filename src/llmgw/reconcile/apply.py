"""apply(state, intents): where a pass's decisions become records, events and counts.

Pure: it returns the state after the intents and the effects that carry them out (store writes, events, counters).
The control plane executes the effects; the test harness takes the state. Events are rendered here, from each
intent's reason code and facts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from llmgw.config.server import ModelSpec
from llmgw.core.conditions import ConditionType
from llmgw.core.explanation import explanation_lines
from llmgw.core.reasons import Reason
from llmgw.reconcile.intents import (
    Add,
    Evict,
    Fail,
    HoldLosses,
    Intent,
    MarkLost,
    Observe,
    Place,
    Preempt,
    Reap,
    ReplicaIntent,
    SetScaleTimer,
    Stop,
    Unplaced,
)
from llmgw.reconcile.node_status import node_conditions
from llmgw.reconcile.scaling import Step, Timer
from llmgw.reconcile.sleep_intents import Sleep, Wake
from llmgw.reconcile.transitions import EVICTED_FOR, after, preempted_for, stop_message
from llmgw.records.state import NodeRecord, ReplicaRecord

HEARD_AGAIN = "nodes are heard from again: losses are declared as usual"


@dataclass(frozen=True)
class State:
    now: float
    models: Mapping[str, ModelSpec]
    nodes: Mapping[str, NodeRecord]
    replicas: Mapping[str, ReplicaRecord]
    demand: Mapping[str, float] = field(default_factory=dict)  # model -> last request that found no replica
    holding: str = ""  # why node losses are held, while they are
    scale_timers: Mapping[str, Timer] = field(default_factory=dict)


@dataclass(frozen=True)
class WriteReplica:
    record: ReplicaRecord


@dataclass(frozen=True)
class DeleteReplica:
    """Its record goes, and with it what was kept about it (last use, requests in flight, gauges)."""

    replica_id: str


@dataclass(frozen=True)
class WriteNode:
    record: NodeRecord


@dataclass(frozen=True)
class Log:
    kind: str
    subject: str
    message: str
    warn: bool = False


@dataclass(frozen=True)
class Count:
    """A replica started or stopped, and why: the metrics' loads, evictions and scale events."""

    model: str
    what: str  # "start" | "stop" | "preempted"
    why: str  # preempted: the model it gave way to


@dataclass(frozen=True)
class Served:
    """A replica of the model is ready: the demand that asked for a load is met (a later eviction of it must not
    load the model again on that old demand)."""

    model: str


@dataclass(frozen=True)
class Holding:
    message: str  # empty: losses are declared again


Effect = WriteReplica | DeleteReplica | WriteNode | Log | Count | Served | Holding | SetScaleTimer


@dataclass(frozen=True)
class Applied:
    state: State
    effects: list[Effect]


def apply(state: State, intents: list[Intent]) -> Applied:
    effects: list[Effect] = []
    holding = _holding(state, intents, effects)
    nodes, replicas, timers = dict(state.nodes), dict(state.replicas), dict(state.scale_timers)
    words: dict[str, str] = {}  # replica -> its event this pass
    adds: dict[str, Add] = {}
    for i in intents:
        if isinstance(i, MarkLost):
            _lose(nodes, i, state.now, effects)
        elif isinstance(i, SetScaleTimer):
            timers[i.model] = i.timer
            effects.append(i)
        elif isinstance(i, Reap):
            gone = replicas.pop(i.replica_id, None)
            effects.append(DeleteReplica(i.replica_id))
            effects.append(Log("replica", i.replica_id, _reaped(i.replica_id, gone)))
        elif not isinstance(i, HoldLosses):
            before = replicas.get(i.replica_id)
            now = replicas[i.replica_id] = after(before, i, state.now)
            if isinstance(i, Add):
                adds[i.replica_id] = i
            _say(words, before, i, now)
    demand = dict(state.demand)
    for rid, r in replicas.items():
        old = state.replicas.get(rid)
        if old is None or (old is not r and old != r):
            effects.extend(_written(old, r, adds.get(rid), demand, state.models, words.get(rid, "")))
    out = State(now=state.now, models=state.models, nodes=nodes, replicas=replicas, demand=demand,
                holding=holding, scale_timers=timers)
    return Applied(out, effects)


def _holding(state: State, intents: list[Intent], effects: list[Effect]) -> str:
    hold = next((i for i in intents if isinstance(i, HoldLosses)), None)
    msg = "" if hold is None else (
        f"{hold.silent} of {hold.live} live nodes are silent at once: assuming the control plane or its network is "
        "at fault, no node is declared lost until contact returns")
    if msg and not state.holding:
        effects.append(Log("control", "plane", msg, warn=True))
    elif state.holding and not msg:
        effects.append(Log("control", "plane", HEARD_AGAIN))
    if msg != state.holding:
        effects.append(Holding(msg))
    return msg


def _lose(nodes: dict[str, NodeRecord], i: MarkLost, now: float, effects: list[Effect]) -> None:
    n = nodes.get(i.node_id)
    if n is None:
        return
    conds = node_conditions(n.conditions, n.report, lost=True, revoked=n.revoked, now=now)
    n = nodes[n.id] = n.model_copy(update={"lost": True, "conditions": conds})
    effects.append(WriteNode(n))
    effects.append(Log("node", n.id, f"node {n.id} lost: silent for {i.silent_for:.0f}s (limit {i.limit:.0f}s)"))


def _reaped(rid: str, r: ReplicaRecord | None) -> str:
    if r is None:
        return f"replica {rid} reaped"
    why = f"{r.stop.reason}: {r.stop.message}" if r.stop is not None else "failed"
    return f"replica {r.id} of {r.model} reaped ({why})"


def _say(words: dict[str, str], before: ReplicaRecord | None, i: ReplicaIntent, r: ReplicaRecord) -> None:
    """The replica's event: placement's words follow what was said of it before this pass (why it was added);
    any other decision's words replace them."""
    said = _event(before, i, r)
    if not said:
        return
    if isinstance(i, Place | Unplaced) and r.id in words:
        said = f"{words[r.id]}; {said}"
    words[r.id] = said


def _event(before: ReplicaRecord | None, i: ReplicaIntent, r: ReplicaRecord) -> str:
    of = f"replica {r.id} of {r.model}"
    match i:
        case Add():
            return f"{of} added: {i.words}" if i.step is Step.Up else ""
        case Place():
            return f"{of} placed on " + ", ".join(a.node_id for a in i.assignments)
        case Unplaced() if i.reason is not None:
            said = before is not None and (c := before.condition(ConditionType.Scheduled)) is not None and (
                c.reason, c.message) == (i.reason, i.words)
            return "" if said else f"{of} cannot be placed: {i.reason}: {i.words}"
        case Unplaced():
            first = before is None or not i.explanation.same_as(before.explanation)
            return f"{of} cannot be placed: " + " | ".join(explanation_lines(i.explanation)[1:]) if first else ""
        case Observe():
            return f"{of} ready at {r.endpoint}" if r.ready and before is not None and not before.ready else ""
        case Fail():
            return f"{of} failed: {i.words}"
        case Stop():
            if i.reason == Reason.Removed:
                return f"replica {r.id} stopping: model {r.model} removed from the catalog"
            if i.reason == Reason.Idle:
                return f"{of} stopping: idle for {i.words}"
            if i.reason == Reason.FasterToLoad:
                return f"{of} stopping: {i.words}"
            return f"{of} stopping: scaled down ({stop_message(r.model, i.reason, i.words)})"
        case Evict():
            return f"{of} evicted: {EVICTED_FOR}{i.for_model}"
        case Sleep():
            return f"{of} asleep at level {i.level}: {i.words}"
        case Wake():
            return f"{of} waking: a request asks for it"
        case Preempt():
            return f"{of} {preempted_for(i)}"
    return ""


def _written(old: ReplicaRecord | None, r: ReplicaRecord, add: Add | None, demand: dict[str, float],
             models: Mapping[str, ModelSpec], said: str) -> list[Effect]:
    out: list[Effect] = []
    if old is None:
        spec = models.get(r.model)
        why = add.step.value if add is not None and add.step is Step.Up else (
            "demand" if spec is not None and spec.on_demand and r.model in demand else "wanted")
        out.append(Count(r.model, "start", why))
    elif old.stop is None and r.stop is not None:
        out.append(Count(r.model, "stop", r.stop.reason.value))
        if r.stop.reason == Reason.Preempted:  # per victim and the model it gave way to: llmgw_preemptions_total
            out.append(Count(r.model, "preempted", r.stop.for_model))
    if r.ready:
        demand.pop(r.model, None)
        out.append(Served(r.model))
    out.append(WriteReplica(r))
    if said:
        out.append(Log("replica", r.id, said))
    return out
