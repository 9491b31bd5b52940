"""place(request, snapshot) -> Placement | Refusal. Deterministic: ties break on node id, then fabric name."""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from llmgw.core.explanation import Candidate, Explanation, NodeVerdict, Shortfall
from llmgw.core.reasons import Reason
from llmgw.core.state import ShardAssignment
from llmgw.placement import scores
from llmgw.placement.checks import Request, fast_reason, feasible
from llmgw.placement.gpus import choose_gpus
from llmgw.placement.snapshot import NodeView, Snapshot

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
    bounds: dict[tuple[float, int, int], float] = {}
    buckets: dict[float, list[NodeView]] = {}
    for n in nodes:
        # everything weights_present and binpack read: the bound is shared by nodes alike in these
        key = (scores.weights_present(n, r), len(n.used_gpus), len(n.gpus))
        bound = bounds.get(key)
        if bound is None:
            s = {"weights": key[0]}
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
        serve = rendezvous = None
        if rank == 0:
            ports = _free_ports(s.node, 2)
            serve = ports[0]
            rendezvous = ports[1] if len(picked) > 1 else None
        adapters = list(s.node.fabrics[fabric].adapters) if fabric else []
        out.append(
            ShardAssignment(
                rank=rank, node_id=s.node.id, address=s.node.address, gpus=s.gpus, serve_port=serve,
                rendezvous_port=rendezvous, fabric=fabric, fabric_adapters=adapters,
            )
        )
    return out


def _rank(c: _Scored) -> tuple[float, str]:
    return (-c.total, c.node.id)


def place(request: Request, snap: Snapshot) -> Placement | Refusal:
    filtered: dict[Reason, int] = {}
    verdicts: list[NodeVerdict] = []
    ok: list[NodeView] = []
    reason_of = fast_reason(request)
    for n in snap.nodes:
        reason = reason_of(n)
        if reason is None:
            ok.append(n)
            continue
        count = filtered[reason] = filtered.get(reason, 0) + 1
        if count <= VERDICTS_PER_REASON:
            verdict = feasible(n, request)  # the node's own words, for the few an explanation shows
            verdicts.append(NodeVerdict(node_id=n.id, reason=reason, message=verdict[1] if verdict else ""))

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


def reservations(
    request: Request, assignments: list[ShardAssignment]
) -> list[tuple[str, list[int], int, list[int], bool]]:
    """What a placement takes from the snapshot, for placing several replicas in one pass."""
    whole = len(assignments) > 1
    return [
        (
            a.node_id, a.gpus, request.model.profile.memory,
            [p for p in (a.serve_port, a.rendezvous_port) if p], whole,
        )
        for a in assignments
    ]
