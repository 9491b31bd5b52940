"""What each replica intent does to a replica record: the conditions it sets, in the words it renders. Pure."""

from __future__ import annotations

from llmgw.core.conditions import ConditionType, Status, set_condition
from llmgw.core.explanation import explanation_lines
from llmgw.core.reasons import Reason
from llmgw.reconcile.intents import (
    Add,
    Evict,
    Fail,
    Observe,
    Place,
    Preempt,
    Release,
    ReplicaIntent,
    Stop,
    Unplaced,
)
from llmgw.reconcile.sleep_intents import Sleep, Wake, slept, woken
from llmgw.reconcile.waits import wait_words
from llmgw.records.state import ReplicaRecord, StopRequest

EVICTED_FOR = "idle, to make room for "


def preempted_for(i: Preempt) -> str:
    return f"preempted for {i.for_model} (priority {i.for_rank} over {i.rank}): drains, then stops"


def stop_message(model: str, reason: Reason, words: str) -> str:
    """The Ready condition's words for a stop: Removed names the model, Idle says for how long."""
    if reason == Reason.Removed:
        return f"model {model} is no longer in the catalog"
    if reason == Reason.Idle:
        return f"unused for {words}"
    return words


def stopped(r: ReplicaRecord, reason: Reason, message: str, now: float, for_model: str = "") -> ReplicaRecord:
    conds = set_condition(r.conditions, ConditionType.Ready, Status.FALSE, reason, message, now)
    stop = StopRequest(reason=reason, message=message, for_model=for_model, at=now)
    return r.model_copy(update={"stop": stop, "conditions": conds, "endpoint": ""})


def failed(r: ReplicaRecord, reason: Reason, message: str, now: float) -> ReplicaRecord:
    conds = set_condition(r.conditions, ConditionType.Ready, Status.FALSE, reason, message, now)
    conds = set_condition(conds, ConditionType.Failed, Status.TRUE, reason, message, now)
    return r.model_copy(update={"conditions": conds, "endpoint": ""})


def released(r: ReplicaRecord, now: float) -> ReplicaRecord:
    if r.released:
        return r
    conds = set_condition(r.conditions, ConditionType.Released, Status.TRUE, Reason.ShardsGone, "", now)
    return r.model_copy(update={"conditions": conds})


def added(i: Add, now: float) -> ReplicaRecord:
    return ReplicaRecord(id=i.replica_id, model=i.model, created_at=now, shards_expected=i.shards_expected,
                         secret=i.secret)


def _placed(r: ReplicaRecord, i: Place, now: float) -> ReplicaRecord:
    where = ", ".join(a.node_id for a in i.assignments)
    conds = set_condition(r.conditions, ConditionType.Scheduled, Status.TRUE, Reason.Placed, "on " + where, now)
    conds = set_condition(conds, ConditionType.Ready, Status.FALSE, Reason.ShardsStarting, "placed", now)
    return r.model_copy(update={"assignments": list(i.assignments), "explanation": i.explanation,
                                "conditions": conds, "shards_expected": i.shards_expected})


def _unplaced(r: ReplicaRecord, i: Unplaced, now: float) -> ReplicaRecord:
    # saying the same refusal again is no change: the old explanation stays, so nothing is written
    expl = r.explanation if r.explanation is not None and i.explanation.same_as(r.explanation) else i.explanation
    why = "; ".join(explanation_lines(expl)[1:3])
    if i.reason is not None:
        conds = set_condition(r.conditions, ConditionType.Scheduled, Status.FALSE, i.reason, i.words, now)
        return r.model_copy(update={"explanation": expl, "conditions": conds})
    if i.room:
        why = f"waiting for idle replica {i.room} of {i.room_model}, evicted to make room, to stop; {why}"
    code = Reason.WaitingForRoom if i.waits or i.room else Reason.Unschedulable
    if i.waits:
        why = f"{wait_words(i.waits)}; {why}"
    conds = set_condition(r.conditions, ConditionType.Scheduled, Status.FALSE, code, why, now)
    return r.model_copy(update={"explanation": expl, "conditions": conds})


def _observed(r: ReplicaRecord, i: Observe, now: float) -> ReplicaRecord:
    conds = set_condition(r.conditions, ConditionType.Ready, i.status, i.reason, i.words, now)
    update: dict[str, object] = {"seen_ranks": list(i.seen_ranks), "conditions": conds, "endpoint": ""}
    if i.status == Status.TRUE:
        update.update(ready_at=r.ready_at or now, endpoint=i.endpoint)
    return r.model_copy(update=update)


def after(r: ReplicaRecord | None, i: ReplicaIntent, now: float) -> ReplicaRecord:
    """The record once the intent is carried out: Add makes one, every other intent needs `r`."""
    if isinstance(i, Add):
        return added(i, now)
    assert r is not None, f"{type(i).__name__} of replica {i.replica_id}, which does not exist"
    match i:
        case Place():
            return _placed(r, i, now)
        case Unplaced():
            return _unplaced(r, i, now)
        case Observe():
            return _observed(r, i, now)
        case Fail():
            return failed(r, i.reason, i.words, now)
        case Stop():
            return stopped(r, i.reason, stop_message(r.model, i.reason, i.words), now)
        case Evict():
            return stopped(r, Reason.Evicted, EVICTED_FOR + i.for_model, now, for_model=i.for_model)
        case Preempt():
            return stopped(r, Reason.Preempted, preempted_for(i), now, for_model=i.for_model)
        case Release():
            return released(r, now)
        case Sleep():
            return slept(r, i, now)
        case Wake():
            return woken(r, now)
