"""Kubernetes-style conditions: type, status (True/False/Unknown), reason, message, transition time."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel


class Status(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(BaseModel):
    type: str
    status: Status
    reason: str
    message: str = ""
    last_transition: float = 0.0


def set_condition(
    conditions: list[Condition], type_: str, status: Status, reason: str, message: str, now: float
) -> list[Condition]:
    """Return a new list with the condition set; the transition time moves only when status changes."""
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


def get_condition(conditions: list[Condition], type_: str) -> Condition | None:
    for c in conditions:
        if c.type == type_:
            return c
    return None
