"""Preemption: which replicas of lower-priority models give way so that a replica of a higher-priority one fits.

A candidate is a placed replica of a model of lower rank (config/server.py ModelSpec.rank), not pinned, with nothing
in flight, idle or not. Among candidates the cheapest to lose goes: fewest recent requests, then fewest GPUs, then
longest since use; one victim is tried before several, and single-node victims before multi-node ones. choose() is
the choice alone, returned with its reason; make_room() carries it out as Preempt intents (drain, then stop), and is
where another way for victims to go (sleep) would be chosen.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from llmgw.config.server import ModelSpec
from llmgw.core.reasons import Reason
from llmgw.placement.checks import Request, prepared
from llmgw.placement.place import Placement, place, reservations
from llmgw.placement.snapshot import NodeView, Snapshot, build_snapshot
from llmgw.reconcile.intents import Preempt
from llmgw.reconcile.waits import Wait, waits_for
from llmgw.reconcile.world import World
from llmgw.records.state import NodeRecord, ReplicaRecord

# bounds one choice's what-ifs (each a placement): single victims tried, and nodes whose candidates are tried as a set
MAX_SINGLES_TRIED = 32
MAX_NODES_TRIED = 16


@dataclass
class Tried:
    """What a pass's preemption learned, for its later replicas: models no victims make room for, and the costliest
    what-if (every candidate gone), kept per candidate set with the snapshot it was made from."""

    hopeless: set[str] = field(default_factory=set)
    everything: dict[frozenset[str], tuple[Snapshot, Snapshot]] = field(default_factory=dict)


@dataclass(frozen=True)
class Victims:
    """Replicas to give way for `for_model`, cheapest first, and why."""

    replicas: tuple[ReplicaRecord, ...]
    for_model: str
    reason: Reason = Reason.Preempted


def rank_of(r: ReplicaRecord, w: World) -> int:
    spec = w.models.get(r.model)
    return spec.rank if spec is not None else 0


def make_room(req: Request, snap: Snapshot, current: Mapping[str, ReplicaRecord], nodes: Mapping[str, NodeRecord],
              w: World, do: Callable[[Preempt], None], tried: Tried | None = None,
              claimed: set[str] | None = None) -> tuple[Wait, ...]:
    """For a replica that fits nowhere: victims chosen and preempted (through `do`, which also updates `current`),
    one round at a time; while those of an earlier round drain and stop, what it waits for. `tried`: what earlier
    replicas of the pass learned (Tried). `claimed`: victims whose room an earlier replica of the pass holds
    (hold_room): another replica of the model makes its own."""
    name = req.model.name
    waits = tuple(x for x in waits_for(name, current.values(), w) if not claimed or x.replica_id not in claimed)
    rank = wanting_rank(req.model, current)
    # later in a pass room only shrinks: a model no set of victims made room for is not tried again
    if not waits and (tried is None or name not in tried.hopeless):
        chosen = choose(req, snap, current, nodes, w, rank, tried)
        if chosen is None and tried is not None:
            tried.hopeless.add(name)
        for v in chosen.replicas if chosen is not None else ():
            do(Preempt(v.id, name, rank_of(v, w), rank))
        waits = tuple(x for x in waits_for(name, current.values(), w) if not claimed or x.replica_id not in claimed)
    return waits


def making_room(model: str, current: Mapping[str, ReplicaRecord], claimed: set[str]) -> bool:
    """Whether replicas preempted for the model, and not claimed by another of its replicas, are still going: then
    idle eviction takes nothing more for it (two victims for one replica)."""
    return any(r.stop is not None and r.stop.reason == Reason.Preempted and r.stop.for_model == model
               and r.id not in claimed for r in current.values())


def hold_room(req: Request, snap: Snapshot, current: Mapping[str, ReplicaRecord], nodes: Mapping[str, NodeRecord],
              w: World, waits: tuple[Wait, ...], claimed: set[str] | None = None) -> Snapshot:
    """The pass's snapshot with the room its victims are freeing reserved for the replica waiting on them: one
    victim gone before another must not let a replica placed later in the pass (a lower or later one) take its
    part, or the waiting replica finds no room once all are gone and preempts again. The victims on the nodes it
    holds are added to `claimed`."""
    if not waits:
        return snap
    gone = [current[x.replica_id] for x in waits if x.replica_id in current]
    on_node: dict[str, list[ReplicaRecord]] = {}
    for r in current.values():
        for node_id in {a.node_id for a in r.assignments}:
            on_node.setdefault(node_id, []).append(r)
    found = place(req, _Fits(req, snap, on_node, nodes, w).without(gone))
    if not isinstance(found, Placement):
        return snap
    held = {a.node_id for a in found.assignments}
    if claimed is not None:
        claimed.update(x.replica_id for x in waits if held.intersection(x.nodes))
    return snap.with_reservation(req.replica_id, reservations(req, found.assignments))


def wanting_rank(spec: ModelSpec, current: Mapping[str, ReplicaRecord]) -> int:
    """The rank a replica the model is missing preempts with: its priority; without one, the promise holds only
    while fewer than `min` of its replicas are placed (one added for load beyond min is a convenience)."""
    placed = sum(1 for r in current.values()
                 if r.model == spec.name and r.placed and not r.failed and r.stop is None)
    return _rank_with(spec, placed)


def _rank_with(spec: ModelSpec, placed: int) -> int:
    if spec.priority is not None or spec.scaling.min == 0:
        return spec.rank
    return spec.rank if placed < spec.scaling.min else 0


def placing_order(current: Mapping[str, ReplicaRecord], w: World) -> Callable[[ReplicaRecord], tuple[int, float, str]]:
    """The order pending replicas are placed in: by the rank each would preempt with (wanting_rank), highest first,
    so the room made for a model goes to it and not to a replica beyond another's min; then oldest first."""
    placed: dict[str, int] = {}
    for r in current.values():
        if r.placed and not r.failed and r.stop is None:
            placed[r.model] = placed.get(r.model, 0) + 1

    def key(r: ReplicaRecord) -> tuple[int, float, str]:
        spec = w.models.get(r.model)
        return (-(_rank_with(spec, placed.get(r.model, 0)) if spec is not None else 0), r.created_at, r.id)

    return key


def preemptible(r: ReplicaRecord, w: World, rank: int) -> bool:
    """Whether a replica may give way to a model of this rank: lower rank, not pinned, placed, nothing in flight."""
    spec = w.models.get(r.model)
    if spec is None or spec.pinned or spec.rank >= rank:
        return False  # the same rank never: two models of one priority would take turns
    return not r.failed and r.stop is None and bool(r.assignments) and w.outstanding.get(r.id, 0) == 0


def cost(r: ReplicaRecord, w: World) -> tuple[float, int, float, str]:
    """What losing it costs, to sort by: recent requests, GPUs held, last use (earlier is cheaper)."""
    gpus = sum(len(a.gpus) for a in r.assignments)
    used = w.last_used.get(r.id, r.ready_at if r.ready_at is not None else r.created_at)
    return (w.recent_requests.get(r.id, 0.0), gpus, used, r.id)


def choose(req: Request, snap: Snapshot, current: Mapping[str, ReplicaRecord], nodes: Mapping[str, NodeRecord],
           w: World, rank: int, tried: Tried | None = None) -> Victims | None:
    """The cheapest victims of a rank below `rank` whose going lets the request fit, or None when none do."""
    candidates = [r for r in current.values() if preemptible(r, w, rank)]
    if not candidates:
        return None
    on_node: dict[str, list[ReplicaRecord]] = {}
    for r in current.values():
        for node_id in {a.node_id for a in r.assignments}:
            on_node.setdefault(node_id, []).append(r)
    fits = _Fits(req, snap, on_node, nodes, w)
    everything = _everything(fits, candidates, tried)
    if not isinstance(place(req, everything), Placement):
        return None  # not even all of them would do: one what-if a pass for a replica that cannot be placed
    # the what-ifs tried are bounded: spent only on victims on a node that could take a shard with all gone (the
    # right class, engine, fabric ...), or the one that would do may lie beyond the bound behind cheaper ones
    tests = [t for _, t in prepared(req)]
    able = {n.id for n in everything.nodes if all(t(n) for t in tests)}
    candidates = sorted((r for r in candidates if any(a.node_id in able for a in r.assignments)),
                        key=lambda r: cost(r, w))  # sorted only once some set would do
    single = [r for r in candidates if len(r.assignments) == 1]
    # a multi-node replica frees several machines and takes long to rebuild: only when nothing single-node will do
    for pool in (single, candidates) if len(single) < len(candidates) else (single,):
        found = _smallest(pool, fits, w)
        if found is not None:
            return Victims(tuple(sorted(found, key=lambda r: cost(r, w))), req.model.name)
    return None


def _everything(fits: _Fits, candidates: list[ReplicaRecord], tried: Tried | None) -> Snapshot:
    """The snapshot as if every candidate were gone: the same for every model of the pass with these candidates,
    until the pass's snapshot changes (a placement, a hold)."""
    if tried is None:
        return fits.without(candidates)
    key = frozenset(r.id for r in candidates)
    hit = tried.everything.get(key)
    if hit is None or hit[0] is not fits.snap:
        hit = (fits.snap, fits.without(candidates))
        tried.everything = {key: hit}  # one kept: a pass's snapshot only moves on
    return hit[1]


class _Fits:
    """Whether the request is placed once these replicas are gone: a what-if rebuilding only their nodes."""

    def __init__(self, req: Request, snap: Snapshot, on_node: Mapping[str, list[ReplicaRecord]],
                 nodes: Mapping[str, NodeRecord], w: World) -> None:
        self.req, self.snap, self.on_node, self.nodes, self.w = req, snap, on_node, nodes, w

    def __call__(self, gone: Iterable[ReplicaRecord]) -> bool:
        return isinstance(place(self.req, self.without(gone)), Placement)

    def without(self, gone: Iterable[ReplicaRecord]) -> Snapshot:
        """The pass's snapshot as if these replicas had stopped."""
        gone = list(gone)
        ids = {g.id for g in gone}
        touched = sorted({a.node_id for g in gone for a in g.assignments} & self.nodes.keys())
        others = {r.id: r for n in touched for r in self.on_node.get(n, ()) if r.id not in ids}
        # the touched nodes counted again in one build, into one new tuple of views, however many there are; what
        # fabric peers hold does not change when replicas go, so each node keeps its view's
        rebuilt = build_snapshot([self.nodes[n] for n in touched], list(others.values()), self.w.models, self.w.now)
        fresh: dict[str, NodeView] = {v.id: v for v in rebuilt.nodes}
        views = tuple(replace(fresh[n.id], fabric_weights=n.fabric_weights) if n.id in fresh else n
                      for n in self.snap.nodes)
        return Snapshot(nodes=views, now=self.snap.now)


def _smallest(pool: list[ReplicaRecord], fits: _Fits, w: World) -> list[ReplicaRecord] | None:
    """One victim, cheapest first; else the smallest set: each node's candidates alone, then nodes added cheapest
    first (a multi-node request needs several cleared); a set found is pruned of every victim it does not need."""
    for r in pool[:MAX_SINGLES_TRIED]:
        if fits([r]):
            return [r]
    by_node: dict[str, list[ReplicaRecord]] = {}
    for r in pool:
        for node_id in {a.node_id for a in r.assignments}:
            by_node.setdefault(node_id, []).append(r)
    order = sorted(by_node, key=lambda n: (len(by_node[n]), sum(cost(r, w)[0] for r in by_node[n]), n))
    order = order[:MAX_NODES_TRIED]
    best: list[ReplicaRecord] | None = None
    for node_id in order:
        group = by_node[node_id]
        if len(group) > 1 and fits(group):
            found = _pruned(group, fits, w)
            if best is None or _weight(found, w) < _weight(best, w):
                best = found
    if best is not None:
        return best
    taken: list[ReplicaRecord] = []
    for node_id in order:
        taken.extend(r for r in by_node[node_id] if r not in taken)
        if fits(taken):
            return _pruned(taken, fits, w)
    return None


def _pruned(victims: list[ReplicaRecord], fits: _Fits, w: World) -> list[ReplicaRecord]:
    """Never more than needed: the costliest first, each victim the request fits without is spared."""
    kept = sorted(victims, key=lambda r: cost(r, w))
    for r in sorted(victims, key=lambda r: cost(r, w), reverse=True):
        rest = [x for x in kept if x.id != r.id]
        if rest and fits(rest):
            kept = rest
    return kept


def _weight(victims: list[ReplicaRecord], w: World) -> tuple[int, float, int]:
    """A set's cost: how many, their recent requests, their GPUs."""
    costs = [cost(r, w) for r in victims]
    return (len(victims), sum(c[0] for c in costs), sum(c[1] for c in costs))
