"""What the reconciler asks for. One place (control.apply) carries these out against the store."""

from __future__ import annotations

from dataclasses import dataclass

from llmgw.core.state import ReplicaRecord


@dataclass(frozen=True)
class MarkLost:
    node_id: str
    message: str


@dataclass(frozen=True)
class PutReplica:
    """Create or update a replica record: placement, conditions, failure, stop."""

    replica: ReplicaRecord
    event: str = ""  # written to the log when not empty


@dataclass(frozen=True)
class Reap:
    replica_id: str
    message: str


@dataclass(frozen=True)
class HoldLosses:
    """Nodes are silent, but too many at once to blame them: none is declared lost this pass."""

    message: str


Intent = MarkLost | PutReplica | Reap | HoldLosses
