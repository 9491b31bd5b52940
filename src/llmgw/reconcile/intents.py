"""What the reconciler asks for, as typed decisions: a reason code and the facts behind it, never rendered text.

`apply.apply(state, intents)` turns them into new records, events and counts; the control plane and the test
harness both carry out what it returns.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmgw.core.conditions import Status
from llmgw.core.explanation import Explanation
from llmgw.core.reasons import Reason
from llmgw.reconcile.scaling import Step, Timer
from llmgw.reconcile.sleep_intents import Sleep, Wake
from llmgw.reconcile.waits import Wait
from llmgw.records.state import ShardAssignment


@dataclass(frozen=True)
class MarkLost:
    """A node silent past the limit is lost."""

    node_id: str
    silent_for: float
    limit: float


@dataclass(frozen=True)
class HoldLosses:
    """Nodes are silent, but too many at once to blame them: none is declared lost this pass."""

    silent: int
    live: int


@dataclass(frozen=True)
class SetScaleTimer:
    """Scaling on load: how long the model's load has been above or below its target, for the next pass."""

    model: str
    timer: Timer


@dataclass(frozen=True)
class Add:
    """A new replica of the model. `step` is Up when scaling on load added it, `words` what the load was."""

    replica_id: str
    model: str
    shards_expected: int
    secret: str
    step: Step = Step.Hold
    words: str = ""


@dataclass(frozen=True)
class Place:
    replica_id: str
    assignments: tuple[ShardAssignment, ...]
    explanation: Explanation
    shards_expected: int


@dataclass(frozen=True)
class Unplaced:
    """Placement found no room; `room` is the replica stopping to make room for it, if any. With a `reason`, no
    node was asked: the model itself cannot be placed yet (its hub source is not resolved), for `words`."""

    replica_id: str
    explanation: Explanation
    room: str = ""
    room_model: str = ""
    reason: Reason | None = None
    words: str = ""
    waits: tuple[Wait, ...] = ()  # replicas preempted for it, draining or stopping (reconcile/waits.py)


@dataclass(frozen=True)
class Observe:
    """A placed replica's readiness as its nodes report it (not a failure: that is Fail)."""

    replica_id: str
    status: Status
    reason: Reason
    words: str
    endpoint: str
    seen_ranks: tuple[int, ...]


@dataclass(frozen=True)
class Fail:
    """The replica failed: a node lost, a shard failed or gone. `words`: the node's own, where it gave any."""

    replica_id: str
    reason: Reason
    words: str


@dataclass(frozen=True)
class Stop:
    """The replica is no longer wanted: Removed (words: none), Idle (words: for how long), ScaledDown (why)."""

    replica_id: str
    reason: Reason
    words: str = ""


@dataclass(frozen=True)
class Evict:
    """An idle replica stops to make room for another model."""

    replica_id: str
    for_model: str


@dataclass(frozen=True)
class Preempt:
    """A replica of a lower priority drains, then stops, to make room for a model of a higher one."""

    replica_id: str
    for_model: str
    rank: int
    for_rank: int


@dataclass(frozen=True)
class Release:
    """A failed replica none of whose shards runs any more: kept on view, holding nothing."""

    replica_id: str


@dataclass(frozen=True)
class Reap:
    """A replica let go (failed or stopped) whose shards are gone: its record is removed."""

    replica_id: str


ReplicaIntent = Add | Place | Unplaced | Observe | Fail | Stop | Evict | Preempt | Release | Sleep | Wake
Intent = MarkLost | HoldLosses | SetScaleTimer | ReplicaIntent | Reap
