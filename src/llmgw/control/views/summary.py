"""One computation of what the cluster holds; ctl status, the dashboard, the API and the metrics all read it.

Pure: records, the catalog and what the routers measured go in, a Summary comes out. Nothing here reads the store
or the clock: the caller passes usage (from the store's running aggregates, never a scan of every request) and now."""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

from llmgw.api.adapter_lines import AdapterLine, adapter_lines
from llmgw.api.model_weights import ModelWeights, model_weights, weights_trouble
from llmgw.api.stats import RouterStats
from llmgw.api.views import NodeRow, ReadyTime, node_row
from llmgw.config.server import ModelSpec
from llmgw.control.chargeback.charge_views import ChargesByKey
from llmgw.core.conditions import Condition
from llmgw.core.reasons import Reason
from llmgw.reconcile import scaling
from llmgw.reconcile.waits import unplaced_lines
from llmgw.records.state import NodeRecord, Phase, ReplicaRecord, leader_shard, phase_condition, replica_phase
from llmgw.store.base import UsageTotal
from llmgw.wire.hub import HubState
from llmgw.wire.messages import EngineLoad, InstallStatus


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
    placement: list[str] = []  # why it is not placed, in words (the explanation's lines), while it is not
    load: EngineLoad | None = None  # the engine's own gauges, from the leading shard's node
    in_flight: int = 0  # requests the routers have on it now


class NodeLine(NodeRow):
    """A node as ctl nodes shows it, with the numbers a page or a metric needs."""

    live: bool = True
    mem_total_bytes: int = 0
    mem_available_bytes: int = 0
    disk_total_bytes: int = 0
    disk_free_bytes: int = 0
    # GPU index -> NVLinked peers; 0 also where the topology is unknown (nvlink_known says which)
    nvlink_peers: dict[int, int] = Field(default_factory=dict)
    nvlink_min: int | None = None  # the fewest of any healthy card; None: no healthy card
    nvlink_known: bool = True
    installs: list[InstallStatus] = Field(default_factory=list)


class ModelLine(BaseModel):
    model: str
    engine: str
    on_demand: bool
    min: int
    max: int
    wanted: int  # replicas the model wants now: the reconciler's rule (reconcile.scaling.wanted)
    replicas: int
    ready: int
    why: list[str] = []  # when fewer are ready than wanted: what the replicas that are not say


class UsageLine(UsageTotal):
    key_name: str = ""
    day_requests: int = 0  # the last 24 hours, at hour resolution (the store's hourly aggregate)
    day_prompt_tokens: int = 0
    day_completion_tokens: int = 0
    in_flight: int = 0


class Summary(BaseModel):
    at: float = 0.0
    nodes_total: int
    nodes_live: int
    nodes: list[NodeLine] = []
    capacity: list[ClassCapacity]
    fabrics: list[FabricCapacity]
    models: list[ModelLine] = []
    weights: list[ModelWeights] = []  # per model whose nodes fetch its weights: resolved to what, and how far
    replicas: list[ReplicaLine]
    idle_replicas: list[str]
    usage: list[UsageLine]
    requests: RouterStats = RouterStats()  # what the routers measured, per model (counts and histograms)
    adapters: list[AdapterLine] = []  # the catalog's LoRA adapters and the ready replicas serving each
    ready_times: list[ReadyTime] = []  # each way to ready (wake, load) as measured (control/nodes/ready_times.py)
    gpu_time: ChargesByKey = ChargesByKey()  # the last day's GPU-seconds and cost per key (chargeback/charge_views.py)
    # /api/status gives the node lines a page at a time: where this page starts (name order), how many it leaves out
    nodes_from: int = 0
    nodes_not_shown: int = 0


@dataclass
class Demand:
    """What the routers asked for lately: models wanted (when), replicas used (when), requests in flight."""

    wanted_at: dict[str, float] = field(default_factory=dict)
    window: float = 60.0
    in_flight: dict[str, int] = field(default_factory=dict)  # per replica


def _leader_load(r: ReplicaRecord, by_id: dict[str, NodeRecord]) -> EngineLoad | None:
    held = leader_shard(r, by_id)
    return held[1].load if held is not None and not held[0].lost else None


Cards = tuple[tuple[str, frozenset[int], int], ...]  # per GPU class: healthy indices, faulty count


@dataclass(frozen=True)
class NodeSummaryFacts:
    """What the summary needs of one node record alone: its line, and its cards per class (healthy indices, faulty
    count). Derived from the record only, so a caller may keep it for as long as it holds the same record."""

    line: NodeLine
    cards: Cards
    shape: Shape  # its cards, fabrics and weights held, one object for every node alike


def node_facts(n: NodeRecord) -> NodeSummaryFacts:
    healthy: dict[str, set[int]] = {}
    faulty: dict[str, int] = {}
    for g in n.report.hardware.gpus:
        healthy.setdefault(g.gpu_class, set())
        if g.faulty:
            faulty[g.gpu_class] = faulty.get(g.gpu_class, 0) + 1
        else:
            healthy[g.gpu_class].add(g.index)
    cards = tuple((k, frozenset(v), faulty.get(k, 0)) for k, v in healthy.items())
    return NodeSummaryFacts(_node_line(n), cards, Shape.of(cards, tuple(f.name for f in n.report.fabrics),
                                                    tuple(n.report.weights)))


class Shape:
    """What capacity counts of a node (cards per class, fabrics, weights held), one object for all nodes alike, so
    that a view counts nodes per shape by identity (a tuple's hash is computed again at every look-up)."""

    __slots__ = ("__weakref__", "cards", "fabrics", "weights")

    def __init__(self, cards: Cards, fabrics: tuple[str, ...], weights: tuple[str, ...]) -> None:
        self.cards, self.fabrics, self.weights = cards, fabrics, weights

    @classmethod
    def of(cls, cards: Cards, fabrics: tuple[str, ...], weights: tuple[str, ...]) -> Shape:
        key = (cards, fabrics, weights)
        held = _ALIKE.get(key)
        if held is None:
            held = _ALIKE[key] = cls(cards, fabrics, weights)
        return held


_ALIKE: weakref.WeakValueDictionary[tuple[object, ...], Shape] = weakref.WeakValueDictionary()  # gone with its nodes


def _node_line(n: NodeRecord) -> NodeLine:
    hw = n.report.hardware
    disk = hw.disk
    peers = {g.index: len(g.nvlink_peers or ()) for g in hw.gpus if not g.faulty}
    return NodeLine.model_construct(  # from a validated record: no second validation
        **node_row(n).__dict__, live=not n.lost, nvlink_peers=peers,
        mem_total_bytes=hw.mem_total_bytes, mem_available_bytes=hw.mem_available_bytes,
        disk_total_bytes=disk.total_bytes if disk else 0,
        disk_free_bytes=disk.free_bytes if disk else 0,
        nvlink_min=min(peers.values()) if peers else None,
        nvlink_known=all(g.nvlink_peers is not None for g in hw.gpus if not g.faulty),
        installs=[] if n.lost else n.report.installs,
    )


def summarize(
    nodes: list[NodeRecord],
    replicas: list[ReplicaRecord],
    usage: list[UsageTotal],
    last_used: dict[str, float],
    now: float,
    idle_after: float = 300.0,
    sources: dict[str, list[str]] | None = None,  # source -> models that use it
    models: dict[str, ModelSpec] | None = None,
    demand: Demand | None = None,
    recent: list[UsageTotal] | None = None,  # usage of the last day
    key_names: dict[str, str] | None = None,
    requests: RouterStats | None = None,
    facts: Callable[[NodeRecord], NodeSummaryFacts] = node_facts,  # the plane passes its memo (one per record)
    hub: Mapping[str, HubState] | None = None,  # model -> what the control plane knows of its hub source
    replica_lines: ReplicaLines | None = None,  # the plane passes its memo (one line per record and moment)
) -> Summary:
    demand = demand or Demand()
    weights = model_weights(models or {}, nodes, replicas, hub or {})
    of = {n.id: facts(n) for n in nodes}
    lines, idle, used = (replica_lines or ReplicaLines()).lines(replicas, {n.id: n for n in nodes}, last_used, now,
                                                                idle_after, demand)
    capacity, fabrics = _capacity(nodes, of, used, _held_as(sources, weights))
    return Summary(
        at=now,
        nodes_total=len(nodes),
        nodes_live=sum(1 for n in nodes if not n.lost),
        nodes=[of[n.id].line for n in sorted(nodes, key=lambda n: n.id)],
        capacity=capacity,
        fabrics=fabrics,
        models=_model_lines(models or {}, lines, demand, now, weights),
        weights=weights,
        replicas=lines,
        idle_replicas=idle,
        usage=_usage_lines(usage, recent or [], key_names or {}, requests),
        requests=requests or RouterStats(),
        adapters=adapter_lines(models or {}, lines),
    )


def _held_as(sources: dict[str, list[str]] | None, weights: list[ModelWeights]) -> dict[str, list[str]] | None:
    """What a node's `weights` entry stands for: a catalog source, or a hub model's pinned source (nodes report
    `hf://org/name@<commit>`, never the revision the catalog names), at the resolved commit only."""
    pinned = {w.pinned: w.model for w in weights if w.kind == "hub" and w.pinned and w.pinned != w.source}
    if not pinned:
        return sources
    out = {k: list(v) for k, v in (sources or {}).items()}
    for src, model in pinned.items():
        out.setdefault(src, []).append(model)
    return out



def _capacity(nodes: list[NodeRecord], of: dict[str, NodeSummaryFacts], used: dict[str, frozenset[int]],
              sources: dict[str, list[str]] | None) -> tuple[list[ClassCapacity], list[FabricCapacity]]:
    """Cards per GPU class and nodes per fabric, over the live nodes."""
    # a fleet's nodes come in few shapes (cards, fabrics, weights, cards in use): each shape is counted once
    shapes: Counter[tuple[Shape, frozenset[int] | None]] = Counter()
    for n in nodes:
        if not n.lost:
            f = of[n.id]
            shapes[(f.shape, used.get(n.id))] += 1
    caps: dict[str, list[int]] = {}  # class -> [total, used, free, faulty]
    fabrics: dict[str, list[int]] = {}  # fabric -> [nodes, free whole nodes]
    held: dict[str, set[str]] = {}
    for (shape, mine), k in shapes.items():
        for cls, healthy, faulty in shape.cards:
            c = caps.setdefault(cls, [0, 0, 0, 0])
            busy = len(healthy & mine) if mine else 0
            c[0] += k * (len(healthy) + faulty)
            c[1] += k * busy
            c[2] += k * (len(healthy) - busy)
            c[3] += k * faulty
        for name in shape.fabrics:
            fc = fabrics.setdefault(name, [0, 0])
            fc[0] += k
            fc[1] += k * (mine is None)
            held.setdefault(name, set()).update(shape.weights)  # what it holds; the models they are, once below
    return (
        [ClassCapacity(gpu_class=k, total=c[0], used=c[1], free=c[2], faulty=c[3]) for k, c in sorted(caps.items())],
        [FabricCapacity(fabric=k, nodes=f[0], free_whole_nodes=f[1],
                        models_held=sorted({m for w in held[k] for m in (sources or {}).get(w, ())}))
         for k, f in sorted(fabrics.items())],
    )


@dataclass(frozen=True)
class _Held:
    """What a replica record says that every view asks (derived once per record), and its line of the moment."""

    record: ReplicaRecord
    ready: bool
    lead_id: str | None
    holds: tuple[tuple[str, tuple[int, ...]], ...]  # node id -> GPU indices; none once released
    lead: NodeRecord | None = None
    idle_s: float | None = None
    flying: int = 0
    line: ReplicaLine | None = None  # None: not made yet


class ReplicaLines:
    """Each replica's line, kept while its record, its leading node's record, its idle time and its requests in
    flight are the same: thousands of lines are otherwise built again at every page view and scrape."""

    def __init__(self) -> None:
        self._held: dict[str, _Held] = {}

    def lines(self, replicas: list[ReplicaRecord], by_id: dict[str, NodeRecord], last_used: dict[str, float],
              now: float, idle_after: float, demand: Demand
              ) -> tuple[list[ReplicaLine], list[str], dict[str, frozenset[int]]]:
        """One line per replica, by model then id; the ids of the ready replicas idle for idle_after or more; the
        GPUs replicas hold per node. Replicas no longer asked for are forgotten."""
        held, self._held = self._held, {}
        out, idle = [], []
        used: dict[str, set[int]] = {}
        for r in sorted(replicas, key=lambda r: (r.model, r.id)):
            h = held.get(r.id)  # a sleeper holds no GPUs (reconcile/sleeping.py)
            if h is None or h.record is not r:
                lead_id = next((a.node_id for a in r.assignments if a.rank == 0), None)
                holds = () if r.released or r.sleep_level else tuple((a.node_id, tuple(a.gpus)) for a in r.assignments)
                h = _Held(r, r.ready, lead_id, holds)
            last = last_used.get(r.id)
            idle_s = now - last if last is not None else None
            if h.ready and (idle_s is None or idle_s >= idle_after):
                idle.append(r.id)
            flying = demand.in_flight.get(r.id, 0)
            lead = by_id.get(h.lead_id) if h.lead_id is not None else None
            line = h.line
            if line is None or h.lead is not lead or h.idle_s != idle_s or h.flying != flying:
                line = _replica_line(r, by_id, idle_s, flying)
                h = _Held(r, h.ready, h.lead_id, h.holds, lead, idle_s, flying, line)
            self._held[r.id] = h
            out.append(line)
            for node_id, gpus in h.holds:
                used.setdefault(node_id, set()).update(gpus)
        return out, idle, {k: frozenset(v) for k, v in used.items()}


def _replica_line(r: ReplicaRecord, by_id: dict[str, NodeRecord], idle_s: float | None, flying: int) -> ReplicaLine:
    cond = phase_condition(r)
    return ReplicaLine.model_construct(  # from validated records: no second validation
        id=r.id,
        model=r.model,
        state=replica_phase(r),
        nodes=r.node_ids(),
        endpoint=r.endpoint,
        reason=cond.reason if cond else None,
        message=cond.message if cond else "",
        idle_s=idle_s,
        conditions=r.conditions,
        placement=unplaced_lines(r),
        load=_leader_load(r, by_id),
        in_flight=flying,
    )


def _model_lines(models: dict[str, ModelSpec], lines: list[ReplicaLine], demand: Demand, now: float,
                 weights: list[ModelWeights]) -> list[ModelLine]:
    trouble = {w.model: weights_trouble(w) for w in weights}
    out = []
    for name, spec in sorted(models.items()):
        mine = [r for r in lines if r.model == name]
        active = [r for r in mine if r.state in (Phase.Pending, Phase.Starting, Phase.Ready, Phase.Unresponsive)]
        demanded = now - demand.wanted_at.get(name, float("-inf")) <= demand.window
        ready = sum(1 for r in mine if r.state == Phase.Ready)
        wanted = scaling.wanted(spec, active=len(active), ready=ready, demanded=demanded)
        why = []
        if ready < wanted:
            why = [f"{r.id}: {'; '.join(r.placement) or r.message or r.state.value}" for r in active
                   if r.state != Phase.Ready][:4] or ["no replica yet"]
            if trouble.get(name):  # the weights' own reason comes first: the replicas' words follow from it
                why.insert(0, trouble[name])
        out.append(ModelLine(model=name, engine=spec.engine, on_demand=spec.on_demand, min=spec.scaling.min,
                             max=spec.scaling.max, wanted=wanted, replicas=len(active), ready=ready, why=why))
    return out


def _usage_lines(usage: list[UsageTotal], recent: list[UsageTotal], names: dict[str, str],
                 requests: RouterStats | None) -> list[UsageLine]:
    day = {(u.key_id, u.model): u for u in recent}
    flying = {(f.key_id, f.model): f.n for f in (requests.in_flight if requests else [])}
    out = []
    for u in usage:
        d = day.get((u.key_id, u.model))
        out.append(UsageLine.model_construct(  # from validated totals: no second validation
            **u.__dict__, key_name=names.get(u.key_id, ""),
            day_requests=d.requests if d else 0, day_prompt_tokens=d.prompt_tokens if d else 0,
            day_completion_tokens=d.completion_tokens if d else 0,
            in_flight=flying.pop((u.key_id, u.model), 0),
        ))
    for (k, m), n in sorted(flying.items()):  # in flight, nothing recorded yet: a key's first requests
        out.append(UsageLine(key_id=k, model=m, requests=0, prompt_tokens=0, completion_tokens=0, last_at=0.0,
                             key_name=names.get(k, ""), in_flight=n))
    return out
