"""The intents that put an idle replica to sleep and wake it, and what each does to its record. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from llmgw.core.conditions import ConditionType, Status, set_condition
from llmgw.core.reasons import Reason
from llmgw.records.state import ReplicaRecord


@dataclass(frozen=True)
class Sleep:
    """An idle replica's engine sleeps at `level` instead of stopping; its GPUs count as free. `words`: why."""

    replica_id: str
    level: Literal[1, 2]
    words: str
    for_model: str = ""  # preempted for this model, rather than idle


@dataclass(frozen=True)
class Wake:
    """A sleeping replica's engine wakes: a request asks for its model."""

    replica_id: str


def slept(r: ReplicaRecord, i: Sleep, now: float) -> ReplicaRecord:
    conds = set_condition(r.conditions, ConditionType.Ready, Status.FALSE, Reason.Sleeping, i.words, now)
    # ready_at is cleared so that the idle timer and the minimum stay run from its wake
    return r.model_copy(update={"conditions": conds, "endpoint": "", "sleep_level": i.level, "slept_at": now,
                                "ready_at": None, "slept_for": i.for_model})


def woken(r: ReplicaRecord, now: float) -> ReplicaRecord:
    words = f"waking from level {r.sleep_level} sleep: a request asks for {r.model}"
    conds = set_condition(r.conditions, ConditionType.Ready, Status.FALSE, Reason.ShardsStarting, words, now)
    return r.model_copy(update={"conditions": conds, "sleep_level": 0, "slept_at": None, "slept_for": "",
                                "woken_at": now})
