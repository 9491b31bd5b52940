"""The fastest way to ready: for a model requests wait for, waking a sleeper against a fresh load. Pure.

The ways are measured per model, engine and GPU class (control/nodes/ready_times.py keeps the estimates;
World.ready_times hands them to the pass): `wake` (from level 1), `wake2` (from level 2: the weights are read
again), `load_held` (a node that holds the weights) and `load_fetch` (a node that must fetch them). A sleeper whose
GPUs are free is woken unless a load placement would make now is measured faster; without a measurement of both, the
sleeper wakes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from llmgw.config.server import ModelSpec
from llmgw.core.reasons import Reason
from llmgw.placement.checks import Request
from llmgw.placement.place import Placement, place
from llmgw.placement.snapshot import build_snapshot
from llmgw.reconcile.intents import Stop
from llmgw.reconcile.world import World
from llmgw.records.state import NodeRecord, ReplicaRecord, ShardAssignment

WAKE, WAKE2, LOAD_HELD, LOAD_FETCH = "wake", "wake2", "load_held", "load_fetch"
WAYS = (WAKE, WAKE2, LOAD_HELD, LOAD_FETCH)
NO_GPU = "none"  # the class of a shard given no GPU (a CPU engine)

Key = tuple[str, str, str, str]  # (model, engine, GPU class, way)


def wake_way(level: int) -> str:
    return WAKE2 if level == 2 else WAKE


def gpu_class(node: NodeRecord | None, a: ShardAssignment) -> str:
    """The class of the first GPU the shard was given on its node (NO_GPU when none, or the node is unknown)."""
    if node is None or not a.gpus:
        return NO_GPU
    return next((g.gpu_class for g in node.report.hardware.gpus if g.index == a.gpus[0]), NO_GPU)


def load_way(spec: ModelSpec, nodes: Iterable[NodeRecord | None]) -> str:
    """A load where every node holds the model's weights whole, or one where some node must fetch them."""
    return LOAD_HELD if all(n is not None and spec.source in n.report.weights for n in nodes) else LOAD_FETCH


def load_key(spec: ModelSpec, by_id: Mapping[str, NodeRecord], assignments: Iterable[ShardAssignment]) -> Key:
    placed = sorted(assignments, key=lambda a: a.rank)
    lead = by_id.get(placed[0].node_id) if placed else None
    cls = gpu_class(lead, placed[0]) if placed else NO_GPU
    return (spec.name, spec.engine, cls, load_way(spec, (by_id.get(a.node_id) for a in placed)))


def wake_key(spec: ModelSpec, by_id: Mapping[str, NodeRecord], r: ReplicaRecord, level: int) -> Key:
    a = r.assignments[0]
    return (spec.name, spec.engine, gpu_class(by_id.get(a.node_id), a), wake_way(level))


def instead_of_waking(w: World, by_id: Mapping[str, NodeRecord], current: Mapping[str, ReplicaRecord],
                      spec: ModelSpec, sleepers: list[ReplicaRecord],
                      held: Mapping[tuple[str, int], str]) -> list[Stop]:
    """For a model requests wait for with no replica awake: its sleepers whose GPUs are free (none in `held`,
    sleeping.held_gpus()) stopped when the load placement would make now is measured faster than the fastest of
    their wakes (a new replica then loads); [] when a wake is faster, a measurement is missing, or no load fits."""
    free = [r for r in sleepers if r.assignments and not any((a.node_id, g) in held for a in r.assignments
                                                             for g in a.gpus)]
    if not free or not any(k[0] == spec.name and k[3] in (LOAD_HELD, LOAD_FETCH) for k in w.ready_times):
        return []
    wakes = [(w.ready_times.get(wake_key(spec, by_id, r, r.sleep_level)), r) for r in free]
    known = [(t, r) for t, r in wakes if t is not None]
    if not known or len(known) < len(free):
        return []
    best, sleeper = min(known, key=lambda x: (x[0], x[1].id))
    snap = build_snapshot(list(by_id.values()), list(current.values()), w.models, w.now)
    placed = place(Request(replica_id="", model=spec), snap)
    if not isinstance(placed, Placement):
        return []
    key = load_key(spec, by_id, placed.assignments)
    load = w.ready_times.get(key)
    if load is None or load >= best:
        return []
    where = ", ".join(a.node_id for a in placed.assignments)
    words = (f"a load on {where} ({key[3]}, {key[2]}: {load:.1f}s measured) is faster than waking "
             f"{sleeper.id} ({best:.1f}s measured)")
    return [Stop(r.id, Reason.FasterToLoad, words) for r in free]
