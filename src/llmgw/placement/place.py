"""place(request, snapshot) -> Placement | Refusal. Deterministic: ties break on node id, then fabric name."""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from itertools import filterfalse, islice

from llmgw.core.explanation import Candidate, Explanation, NodeVerdict, Shortfall
from llmgw.core.reasons import Reason
from llmgw.placement import scores
from llmgw.placement.checks import Request, prepared
from llmgw.placement.gpus import choose_gpus
from llmgw.placement.snapshot import NodeView, Reservation, Snapshot
from llmgw.records.state import ShardAssignment

VERDICTS_PER_REASON = 5


@dataclass(frozen=True)
class Placement:
    assignments: list[ShardAssignment]
    explanation: Explanation


@dataclass(frozen=True)
class Refusal:
    explanation: Explanation


@dataclass(frozen=True)
class _Scored:
    node: NodeView
    gpus: list[int]
    scores: dict[str, float]
    total: float


def _score(n: NodeView, r: Request) -> _Scored:
    p = r.model.profile
    gpus, nvlink = choose_gpus(n, p.gpu_class, p.gpus_per_shard)
    s = {"weights": scores.weights_present(n, r)}
    if r.failed_on:
        s["fresh"] = scores.fresh(n, r)
    if p.gpus_per_shard > 1:
        s["nvlink"] = nvlink
    if p.gpus_per_shard:
        s["binpack"] = scores.binpack(n, r, len(n.used_gpus) + len(gpus))
    return _Scored(n, gpus, s, scores.total(s))


def _top(nodes: list[NodeView], r: Request, count: int, memo: dict[str, _Scored]) -> list[_Scored]:
    """The first `count` of sorted((_score(n, r) for n in nodes), key=_rank), without scoring every node.

    Only the NVLink score needs cards chosen; the others follow from a node's weights and card counts. So
    each node gets a bound, the total with NVLink at its best, and nodes are scored in order of bound
    until no bound can beat the count-th best. The bound adds the same terms in the same order as the
    total, and rounding is monotonic, so no total exceeds its bound and the answer is the same.
    """
    k = r.model.profile.gpus_per_shard
    bounds: dict[tuple[float, int, int, float], float] = {}
    buckets: dict[float, list[NodeView]] = {}
    for n in nodes:
        # everything weights_present and binpack read: the bound is shared by nodes alike in these
        key = (scores.weights_present(n, r), len(n.used_gpus), len(n.gpus), scores.fresh(n, r))
        bound = bounds.get(key)
        if bound is None:
            s = {"weights": key[0]}
            if r.failed_on:
                s["fresh"] = key[3]
            if k > 1:
                s["nvlink"] = 1.0
            if k:
                s["binpack"] = scores.binpack(n, r, key[1] + k)
            bound = bounds[key] = scores.total(s)
        buckets.setdefault(bound, []).append(n)
    best: list[_Scored] = []
    for bound in sorted(buckets, reverse=True):
        if len(best) == count and bound < best[-1].total:
            break
        for n in sorted(buckets[bound], key=lambda n: n.id):
            if len(best) == count:
                worst = best[-1]
                if bound < worst.total or (bound == worst.total and n.id > worst.node.id):
                    break
            sc = memo.get(n.id)
            if sc is None:
                sc = memo[n.id] = _score(n, r)
            bisect.insort(best, sc, key=_rank)
            del best[count:]
    return best


def _free_ports(n: NodeView, count: int) -> list[int]:
    out: list[int] = []
    port = n.port_low
    while len(out) < count and port <= n.port_high:
        if port not in n.used_ports:
            out.append(port)
        port += 1
    return out


def _assignments(picked: list[_Scored], fabric: str | None) -> list[ShardAssignment]:
    out: list[ShardAssignment] = []
    for rank, s in enumerate(picked):
        serve = rendezvous = worker = None
        if rank == 0:
            ports = _free_ports(s.node, 2)
            serve = ports[0]
            rendezvous = ports[1] if len(picked) > 1 else None
        else:  # every port a rank binds is reserved here: a worker that takes one unreserved collides later
            worker = _free_ports(s.node, 1)[0]
        adapters = list(s.node.fabrics[fabric].adapters) if fabric else []
        out.append(
            ShardAssignment(
                rank=rank, node_id=s.node.id, address=s.node.address, gpus=s.gpus, serve_port=serve,
                rendezvous_port=rendezvous, worker_port=worker, fabric=fabric, fabric_adapters=adapters,
            )
        )
    return out


def _rank(c: _Scored) -> tuple[float, str]:
    return (-c.total, c.node.id)


def _filter(r: Request, nodes: tuple[NodeView, ...]) -> tuple[list[NodeView], dict[Reason, int], list[NodeVerdict]]:
    """The nodes every check passes; how many nodes each reason turned away; the words of the first few per reason.

    Check by check over the nodes still standing, rather than node by node: a node leaves at the first check it
    fails, as it would node by node, but the loop over ten thousand nodes runs in C (filter) and what is left in
    Python is one call of a check's prepared test per node it reaches. Counts and verdicts are then put in the
    order a node-by-node pass gives them, so an explanation does not depend on how it was computed.
    """
    left: list[NodeView] | tuple[NodeView, ...] = nodes
    filtered: dict[Reason, int] = {}
    shown: list[tuple[NodeView, NodeVerdict]] = []
    for check, test in prepared(r):
        kept = list(filter(test, left))
        if len(kept) == len(left):
            continue
        filtered[check.reason] = len(left) - len(kept)
        # Asks again, only as far as the few failing nodes an explanation shows, rather than keeping every
        # node's answer: a check that turns many away has its few soon, and one that turns few away costs at
        # most one more pass over the nodes.
        for n in islice(filterfalse(test, left), VERDICTS_PER_REASON):
            shown.append((n, NodeVerdict(node_id=n.id, reason=check.reason, message=check.explain(n, r))))
        left = kept
    if len(filtered) > 1:
        # node by node, a reason is counted from its first node on, and verdicts come in node order
        pos = dict(zip(map(id, nodes), range(len(nodes)), strict=True))
        first = {v.reason: pos[id(n)] for n, v in reversed(shown)}  # reversed: a reason's first node is set last
        filtered = {k: filtered[k] for k in sorted(filtered, key=first.__getitem__)}
        shown.sort(key=lambda s: pos[id(s[0])])
    return list(left), filtered, [v for _, v in shown]


def place(request: Request, snap: Snapshot) -> Placement | Refusal:
    ok, filtered, verdicts = _filter(request, snap.nodes)

    need = request.model.profile.nodes
    short: list[Shortfall] = []

    def explain(placed: bool, chosen: Candidate | None = None) -> Explanation:
        return Explanation(
            model=request.model.name, at=snap.now, nodes_evaluated=len(snap.nodes), nodes_needed=need, placed=placed,
            filtered=filtered, verdicts=verdicts, shortfalls=short, chosen=chosen,
        )

    if need == 1:
        if not ok:
            return Refusal(explain(False))
        best = _top(ok, request, 1, {})[0]
        chosen = Candidate(nodes=[best.node.id], scores=best.scores, total=best.total)
        return Placement(_assignments([best], None), explain(True, chosen))

    # Multi-node: whole nodes of one fabric, never two. Each fabric is a separate candidate.
    by_fabric: dict[str, list[NodeView]] = {}
    for n in ok:
        for f in n.fabrics:
            by_fabric.setdefault(f, []).append(n)
    candidates: list[tuple[float, str, list[_Scored]]] = []
    memo: dict[str, _Scored] = {}  # a node on two fabrics is scored once
    for fname in sorted(by_fabric):
        members = by_fabric[fname]
        if len(members) < need:
            short.append(Shortfall(fabric=fname, fit=len(members), need=need))
            continue
        picked = _top(members, request, need, memo)
        candidates.append((-sum(s.total for s in picked), fname, picked))
    if not candidates:
        if ok and short:
            filtered[Reason.FabricTooSmall] = len(ok)
        return Refusal(explain(False))
    _, fname, picked = min(candidates, key=lambda c: (c[0], c[1]))
    total = sum(s.total for s in picked)
    merged: dict[str, float] = {}
    for sc in picked:
        for k, val in sc.scores.items():
            merged[k] = merged.get(k, 0.0) + val / len(picked)
    chosen = Candidate(nodes=[s.node.id for s in picked], scores=merged, total=total, fabric=fname)
    return Placement(_assignments(picked, fname), explain(True, chosen))


def reservations(request: Request, assignments: list[ShardAssignment]) -> list[Reservation]:
    """What a placement takes from the snapshot, for placing several replicas in one pass."""
    whole = len(assignments) > 1
    return [
        Reservation(
            node_id=a.node_id, gpus=tuple(a.gpus), memory=request.model.profile.memory,
            ports=a.ports(), whole=whole,
        )
        for a in assignments
    ]
