"""What the reconciler asks for. One place (control.apply) carries these out against the store."""

from __future__ import annotations

from dataclasses import dataclass

from llmgw.core.state import ReplicaRecord
from llmgw.reconcile.scaling import Timer


@dataclass(frozen=True)
class MarkLost:
    node_id: str
    message: str


@dataclass(frozen=True)
class PutReplica:
    """Create or update a replica record: placement, conditions, failure, stop."""

    replica: ReplicaRecord
    event: str = ""  # written to the log when not empty
    why: str = ""  # a new replica: why it was added (LoadAboveTarget), for the metrics' scale events


@dataclass(frozen=True)
class Reap:
    replica_id: str
    message: str


@dataclass(frozen=True)
class HoldLosses:
    """Nodes are silent, but too many at once to blame them: none is declared lost this pass."""

    message: str


@dataclass(frozen=True)
class SetScaleTimer:
    """Scaling on load: how long the model's load has been above or below its target, for the next pass."""

    model: str
    timer: Timer


Intent = MarkLost | PutReplica | Reap | HoldLosses | SetScaleTimer
