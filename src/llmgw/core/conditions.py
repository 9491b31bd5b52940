"""Conditions in the controller pattern: a typed kind, True/False/Unknown, a reason code, the machine's words and
when the status last moved. Unknown means nobody knows yet (a node not yet probed), never "probably fine"."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel

from llmgw.core.reasons import Reason


class Status(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class ConditionType(StrEnum):
    # replicas
    Scheduled = "Scheduled"  # placed on nodes
    Ready = "Ready"  # replica: every shard serves; node: reporting, admitted, usable for placement
    Failed = "Failed"  # replica: it failed (lost a node or a shard), and why; replaced, then reaped
    Released = "Released"  # replica: failed and none of its shards runs any more: on view, holding nothing
    # nodes
    Discovered = "Discovered"  # the last hardware probe completed
    EnginesReady = "EnginesReady"  # every engine it has runs and accepts the flags llmgw passes
    FabricsReady = "FabricsReady"  # every declared fabric adapter is present with an ACTIVE port
    GPUsHealthy = "GPUsHealthy"  # no card reported faulty, discovery had no trouble
    CPUFeatures = "CPUFeatures"  # the vector extensions engines run well with (a warning: still usable)


class Condition(BaseModel):
    type: ConditionType
    status: Status
    reason: Reason
    message: str = ""
    last_transition: float = 0.0

    @property
    def true(self) -> bool:
        return self.status == Status.TRUE


def set_condition(
    conditions: list[Condition], type_: ConditionType, status: Status, reason: Reason, message: str, now: float
) -> list[Condition]:
    """Return a new list with the condition set; the transition time moves only when status changes, so setting
    what is already there returns an equal list (and nothing needs writing)."""
    out: list[Condition] = []
    found = False
    for c in conditions:
        if c.type == type_:
            found = True
            moved = c.status != status
            out.append(
                Condition(
                    type=type_,
                    status=status,
                    reason=reason,
                    message=message,
                    last_transition=now if moved else c.last_transition,
                )
            )
        else:
            out.append(c)
    if not found:
        out.append(Condition(type=type_, status=status, reason=reason, message=message, last_transition=now))
    return out


def get_condition(conditions: list[Condition], type_: ConditionType) -> Condition | None:
    for c in conditions:
        if c.type == type_:
            return c
    return None
