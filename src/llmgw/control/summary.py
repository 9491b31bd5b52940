"""One computation of what the cluster holds; ctl status, the dashboard and the metrics all read it."""

from __future__ import annotations

from pydantic import BaseModel

from llmgw.core.conditions import Condition
from llmgw.core.reasons import Reason
from llmgw.core.state import NodeRecord, Phase, ReplicaRecord, phase_condition, replica_phase
from llmgw.store.base import UsageTotal
from llmgw.wire.messages import FetchStatus


class ClassCapacity(BaseModel):
    gpu_class: str
    total: int = 0
    used: int = 0
    free: int = 0
    faulty: int = 0  # neither used nor free: never placed on


class FabricCapacity(BaseModel):
    fabric: str
    nodes: int = 0
    free_whole_nodes: int = 0
    models_held: list[str] = []  # models whose weights a live node of the fabric holds (a shared filer counts)


class ReplicaLine(BaseModel):
    id: str
    model: str
    state: Phase  # replica_phase(): the one naming of a replica's phase
    nodes: list[str]
    endpoint: str
    reason: Reason | None  # the condition that says why it is in that phase (phase_condition)
    message: str
    idle_s: float | None
    conditions: list[Condition] = []


class NodeLine(BaseModel):
    node: str
    conditions: list[Condition]
    fetches: list[FetchStatus] = []  # weights arriving, waited for or failed, as the node reported them


class Summary(BaseModel):
    nodes_total: int
    nodes_live: int
    nodes: list[NodeLine] = []
    capacity: list[ClassCapacity]
    fabrics: list[FabricCapacity]
    replicas: list[ReplicaLine]
    idle_replicas: list[str]
    usage: list[UsageTotal]


def summarize(
    nodes: list[NodeRecord],
    replicas: list[ReplicaRecord],
    usage: list[UsageTotal],
    last_used: dict[str, float],
    now: float,
    idle_after: float = 300.0,
    sources: dict[str, list[str]] | None = None,  # source -> models that use it
) -> Summary:
    used: dict[str, set[int]] = {}
    busy_nodes: set[str] = set()
    for r in replicas:
        if r.released:
            continue  # failed and its shards gone: on view, holding nothing
        for a in r.assignments:
            used.setdefault(a.node_id, set()).update(a.gpus)
            busy_nodes.add(a.node_id)
    caps: dict[str, ClassCapacity] = {}
    fabrics: dict[str, FabricCapacity] = {}
    for n in nodes:
        if n.lost:
            continue
        for g in n.report.hardware.gpus:
            c = caps.setdefault(g.gpu_class, ClassCapacity(gpu_class=g.gpu_class))
            c.total += 1
            if g.faulty:
                c.faulty += 1
            elif g.index in used.get(n.id, set()):
                c.used += 1
            else:
                c.free += 1
        for f in n.report.fabrics:
            fc = fabrics.setdefault(f.name, FabricCapacity(fabric=f.name))
            fc.nodes += 1
            if n.id not in busy_nodes:
                fc.free_whole_nodes += 1
            held = {m for w in n.report.weights for m in (sources or {}).get(w, ())}
            fc.models_held = sorted(held.union(fc.models_held))
    lines = []
    idle = []
    for r in sorted(replicas, key=lambda r: (r.model, r.id)):
        cond = phase_condition(r)
        last = last_used.get(r.id)
        idle_s = now - last if last is not None else None
        if r.ready and (idle_s is None or idle_s >= idle_after):
            idle.append(r.id)
        lines.append(
            ReplicaLine(
                id=r.id,
                model=r.model,
                state=replica_phase(r),
                nodes=r.node_ids(),
                endpoint=r.endpoint,
                reason=cond.reason if cond else None,
                message=cond.message if cond else "",
                idle_s=idle_s,
                conditions=r.conditions,
            )
        )
    return Summary(
        nodes_total=len(nodes),
        nodes_live=sum(1 for n in nodes if not n.lost),
        nodes=[NodeLine(node=n.id, conditions=n.conditions, fetches=[] if n.lost else n.report.fetches)
               for n in sorted(nodes, key=lambda n: n.id)],
        capacity=sorted(caps.values(), key=lambda c: c.gpu_class),
        fabrics=sorted(fabrics.values(), key=lambda f: f.fabric),
        replicas=lines,
        idle_replicas=idle,
        usage=usage,
    )
