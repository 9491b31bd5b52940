"""Eviction: which idle replica of another on-demand model to stop so that a request that fits nowhere fits.

A candidate is tried on the pass's snapshot with only its own node counted again without it (a what-if), not on
a snapshot rebuilt whole for each candidate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from llmgw.config.server import ModelSpec
from llmgw.placement.checks import Request
from llmgw.placement.place import Placement, place
from llmgw.placement.snapshot import Snapshot, build_snapshot
from llmgw.reconcile.preemption import wanting_rank
from llmgw.reconcile.world import World
from llmgw.records.state import NodeRecord, ReplicaRecord


def evictable(r: ReplicaRecord, w: World, exclude_model: str, rank: int | None = None) -> float | None:
    """When an idle single-node replica of another on-demand model was last used; None if it may not be evicted.
    `rank`: the one the wanting replica preempts with (preemption.wanting_rank), else its model's."""
    spec: ModelSpec | None = w.models.get(r.model)
    if spec is None or r.model == exclude_model or not spec.on_demand or spec.pinned:
        return None  # min >= 1 is a promise that the model stays up; pinned, never demoted
    wanting = w.models.get(exclude_model)
    if rank is None and wanting is not None:
        rank = wanting.rank
    if rank is not None and spec.rank > rank:
        return None  # a lower priority never takes a higher one's room, idle or not
    if not r.ready or len(r.assignments) != 1:
        return None  # a multi-node replica frees several machines and takes long to rebuild
    used = w.last_used.get(r.id)
    if used is None:
        return None  # unknown is not idle: after a restart nothing has reported usage yet
    if w.outstanding.get(r.id, 0) > 0 or w.now - used < w.timings.evict_idle_after:
        return None
    if r.ready_at is not None and w.now - r.ready_at < w.timings.evict_protect:
        return None  # recently started: evicting it now would let two models take turns
    return used


def victim(req: Request, snap: Snapshot, current: Mapping[str, ReplicaRecord], nodes: Mapping[str, NodeRecord],
           w: World) -> ReplicaRecord | None:
    """The longest idle candidate whose removal lets this request fit, if any."""
    rank = wanting_rank(req.model, current)  # a replica beyond a promised model's min ranks as on-demand
    candidates = []
    for r in current.values():
        used = evictable(r, w, req.model.name, rank)
        if used is not None:
            candidates.append((used, r.id, r))
    on_node: dict[str, list[ReplicaRecord]] = {}
    for r in current.values():
        for node_id in {a.node_id for a in r.assignments}:
            on_node.setdefault(node_id, []).append(r)
    for _, _, r in sorted(candidates, key=lambda c: (c[0], c[1])):
        what_if = without(snap, r, on_node, nodes, w)
        if what_if is not None and isinstance(place(req, what_if), Placement):
            return r
    return None


def without(snap: Snapshot, gone: ReplicaRecord, on_node: Mapping[str, list[ReplicaRecord]],
            nodes: Mapping[str, NodeRecord], w: World) -> Snapshot | None:
    """The snapshot as if `gone` (on one node) had stopped: that node's view is built again from the replicas
    still on it (`on_node`: node -> replicas with a shard there). What its fabric peers hold does not change when a
    replica goes, so that is kept."""
    node_id = gone.assignments[0].node_id
    rec, view = nodes.get(node_id), snap.node(node_id)
    if rec is None or view is None:
        return None
    others = [r for r in on_node.get(node_id, ()) if r.id != gone.id]
    fresh = build_snapshot([rec], others, w.models, w.now).nodes[0]
    return snap.with_node(replace(fresh, fabric_weights=view.fabric_weights))
