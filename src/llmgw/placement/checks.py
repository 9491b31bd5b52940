"""Feasibility checks: node in, None (fits) or (Reason, the node's own words) out. Order matters: first wins."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from llmgw.config.server import ModelSpec
from llmgw.core.reasons import Reason
from llmgw.placement.snapshot import NodeView

Verdict = tuple[Reason, str] | None


@dataclass(frozen=True)
class Request:
    replica_id: str
    model: ModelSpec

    @property
    def multi_node(self) -> bool:
        return self.model.profile.nodes > 1


def node_live(n: NodeView, r: Request) -> Verdict:
    if not n.live:
        return Reason.NodeNotReady, n.not_live_reason or "node is not reporting"
    return None


def engine_ready(n: NodeView, r: Request) -> Verdict:
    name = r.model.engine
    if not n.engines_probed:
        return Reason.EngineNotProbed, "has not probed its engines yet (never probed is not has none)"
    e = n.engines.get(name)
    if e is None:
        if n.install_progress:
            return Reason.EngineMissing, "; ".join(n.install_progress)
        return Reason.EngineMissing, f"{name} is not installed"
    if not e.runs:
        return Reason.EngineCannotRun, f"{name} {e.version} cannot run: {e.message}".replace("  ", " ")
    return None


def gpu_class(n: NodeView, r: Request) -> Verdict:
    want = r.model.profile.gpu_class
    if want is None or r.model.profile.gpus_per_shard == 0:
        return None
    if want not in n.gpu_classes:
        have = sorted(n.gpu_classes)
        return Reason.GPUClassMismatch, f"has {', '.join(have) or 'no GPUs'}, needs {want}"
    return None


def node_whole(n: NodeView, r: Request) -> Verdict:
    if n.held_whole_by:
        return Reason.NodeNotWhole, f"held whole by multi-node replica {n.held_whole_by}"
    if r.multi_node and n.shard_count:
        return Reason.NodeNotWhole, f"runs {n.shard_count} other shard(s); multi-node replicas take whole nodes"
    return None


def gpus_free(n: NodeView, r: Request) -> Verdict:
    need = r.model.profile.gpus_per_shard
    if need == 0:
        return None
    cls = r.model.profile.gpu_class
    free = len(n.free_gpus(cls))
    if free < need:
        faulty = [g for g in n.gpus if g.faulty and (cls is None or g.gpu_class == cls)]
        extra = f"; {len(faulty)} faulty ({faulty[0].fault or 'reported faulty'})" if faulty else ""
        return Reason.InsufficientGPUs, f"{free} free healthy GPU(s), needs {need}{extra}"
    return None


def memory(n: NodeView, r: Request) -> Verdict:
    need = r.model.profile.memory
    if need == 0:
        return None
    free = n.mem_total - n.mem_reserved
    if free < need:
        return Reason.InsufficientMemory, f"{free / 2**30:.1f} GiB unreserved memory, needs {need / 2**30:.1f} GiB"
    return None


def fabric(n: NodeView, r: Request) -> Verdict:
    if not r.multi_node:
        return None
    if not n.fabrics:
        return Reason.NoFabric, "advertises no fabric with an ACTIVE adapter"
    return None


def ports(n: NodeView, r: Request) -> Verdict:
    # counts only ports inside the range: a reported shard may hold one outside it, taking nothing from it
    if n.free_port_count() < 2:
        return Reason.NoFreePort, f"no free port in {n.port_low}-{n.port_high}"
    return None


Check = Callable[[NodeView, Request], Verdict]

CHECKS: tuple[Check, ...] = (
    node_live,
    engine_ready,
    gpu_class,
    node_whole,
    gpus_free,
    memory,
    fabric,
    ports,
)


def fast_reason(r: Request) -> Callable[[NodeView], Reason | None]:
    """For the hot loop: the Reason feasible(n, r) would give, without building the node's message.

    The same questions in the same order as CHECKS, asked in one call and only as far as this request
    needs. place() still asks CHECKS for the words of the few nodes an explanation shows; every other node
    needs only the reason, to be counted. tests/placement/test_invariants.py holds the two to agreement.
    """
    p = r.model.profile
    engine, need, cls, mem, multi = r.model.engine, p.gpus_per_shard, p.gpu_class, p.memory, r.multi_node
    want = cls if need else None

    def reason(n: NodeView) -> Reason | None:
        if not n.live:
            return Reason.NodeNotReady
        if not n.engines_probed:
            return Reason.EngineNotProbed
        e = n.engines.get(engine)
        if e is None:
            return Reason.EngineMissing
        if not e.runs:
            return Reason.EngineCannotRun
        if want is not None and want not in n.gpu_classes:
            return Reason.GPUClassMismatch
        if n.held_whole_by or (multi and n.shard_count):
            return Reason.NodeNotWhole
        if need and len(n.free_gpus(cls)) < need:
            return Reason.InsufficientGPUs
        if mem and n.mem_total - n.mem_reserved < mem:
            return Reason.InsufficientMemory
        if multi and not n.fabrics:
            return Reason.NoFabric
        if n.free_port_count() < 2:
            return Reason.NoFreePort
        return None

    return reason


def feasible(n: NodeView, r: Request) -> Verdict:
    for check in CHECKS:
        v = check(n, r)
        if v is not None:
            return v
    return None
