"""What asking for a shard's weights answers: where they are, what is being done to have them, or why they cannot
be had (a Reason code and the node's words)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from llmgw.core.reasons import Reason


@dataclass(frozen=True)
class Ready:
    path: Path


@dataclass(frozen=True)
class Waiting:
    message: str
    reason: str = Reason.WeightsFetching


@dataclass(frozen=True)
class Failed:
    reason: str
    message: str


Outcome = Ready | Waiting | Failed
