"""What a replica not yet placed waits for: replicas preempted for its model, draining or stopping, as facts for
its Scheduled condition, and the words that condition says."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from llmgw.core.conditions import ConditionType
from llmgw.core.explanation import explanation_lines
from llmgw.core.reasons import Reason
from llmgw.reconcile.world import World
from llmgw.records.state import ReplicaRecord


@dataclass(frozen=True)
class Wait:
    """A replica stopping to make room: its model, its nodes, its requests in flight and the drain time left."""

    replica_id: str
    model: str
    nodes: tuple[str, ...]
    in_flight: int
    drain_left: float  # seconds until its engine is stopped whatever is in flight
    rank: int
    for_rank: int


def waits_for(model: str, replicas: Iterable[ReplicaRecord], w: World) -> tuple[Wait, ...]:
    """Replicas preempted for `model` that have not gone yet."""
    spec = w.models.get(model)
    out = []
    for r in replicas:
        if r.stop is None or r.stop.reason != Reason.Preempted or r.stop.for_model != model:
            continue
        victim = w.models.get(r.model)
        left = max(0.0, w.timings.drain_timeout - (w.now - r.stop.at))
        out.append(Wait(r.id, r.model, tuple(r.node_ids()), w.outstanding.get(r.id, 0), left,
                        victim.rank if victim else 0, spec.rank if spec else 0))
    return tuple(sorted(out, key=lambda x: x.replica_id))


def wait_words(waits: Iterable[Wait]) -> str:
    """'waits for sim-8b on node03 to drain: 1 request in flight, at most 30 s (preempted: priority 100 over 0)'."""
    parts = []
    for x in waits:
        where = f"{x.model} on {', '.join(x.nodes) or 'no node'}"
        n = f"{x.in_flight} request{'s' if x.in_flight != 1 else ''}"
        if x.in_flight and x.drain_left > 0:
            doing = f"to drain: {n} in flight, at most {math.ceil(x.drain_left)} s"
        elif x.in_flight:  # its engine is stopped whatever is still in flight: not "nothing"
            doing = f"to stop: drain time over, {n} in flight cut off"
        else:
            doing = "to stop: nothing in flight"
        parts.append(f"{where} {doing} (preempted: priority {x.for_rank} over {x.rank})")
    return "waits for " + "; and for ".join(parts) if parts else ""


def unplaced_lines(r: ReplicaRecord) -> list[str]:
    """Why a replica is not placed, for people: when room is being made for it, what it waits for first (its
    Scheduled condition's words, which hold the explanation's first two lines), then the rest of the explanation."""
    if r.placed or r.explanation is None:
        return []
    lines = explanation_lines(r.explanation)[1:]
    c = r.condition(ConditionType.Scheduled)
    if c is not None and c.reason == Reason.WaitingForRoom:
        return [c.message, *lines[2:]]
    return lines
