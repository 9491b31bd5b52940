"""A read-only picture of the cluster that placement works on. Built once per pass; updated copy-on-write."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import cached_property
from operator import attrgetter

from llmgw.config.server import ModelSpec
from llmgw.records.state import NodeRecord, ReplicaRecord
from llmgw.wire.messages import GPU, WIRE_VERSION, EngineStatus, Fabric, NodeReport


@dataclass(frozen=True)
class NodeView:
    id: str
    address: str
    live: bool
    engines_probed: bool
    engines: dict[str, EngineStatus]
    install_progress: tuple[str, ...]
    gpus: tuple[GPU, ...]
    used_gpus: frozenset[int]
    mem_total: int
    mem_reserved: int
    fabrics: dict[str, Fabric]
    weights: frozenset[str]  # sources this node holds whole
    used_ports: frozenset[int]
    port_low: int
    port_high: int
    shard_count: int = 0  # shards of any replica placed here
    held_whole_by: str = ""  # a multi-node replica holds this node whole
    not_live_reason: str = ""
    fabric_weights: frozenset[str] = frozenset()  # sources a live node of one of its fabrics holds: a peer copy
    wire_version: int = WIRE_VERSION  # the version of the agent protocol the node's agent speaks
    _free_cache: dict[str | None, tuple[int, ...]] = field(default_factory=dict, compare=False, repr=False)
    # Derived from the cards once per view, while they are being read anyway: placement asks every node for
    # its free cards on every request, and a replace()d view derives them again, so nothing goes stale.
    gpu_classes: frozenset[str] = field(init=False, compare=False, repr=False)
    _healthy: dict[str | None, tuple[int, ...]] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        cards = self.gpus
        classes = frozenset([g.gpu_class for g in cards])
        every = tuple([g.index for g in cards if g.offered_whole])
        healthy: dict[str | None, tuple[int, ...]] = {None: every}
        if len(classes) == 1:
            healthy.update(dict.fromkeys(classes, every))
        else:
            for c in classes:
                healthy[c] = tuple([g.index for g in cards if g.offered_whole and g.gpu_class == c])
        object.__setattr__(self, "gpu_classes", classes)
        object.__setattr__(self, "_healthy", healthy)

    def free_gpus(self, gpu_class: str | None) -> tuple[int, ...]:
        """Healthy, unused cards not in MIG mode (of the class, when one is asked for), lowest index first."""
        used = self.used_gpus
        if not used:
            return self._healthy.get(gpu_class, ())
        hit = self._free_cache.get(gpu_class)
        if hit is None:
            hit = tuple([i for i in self._healthy.get(gpu_class, ()) if i not in used])
            self._free_cache[gpu_class] = hit
        return hit

    def free_port_count(self) -> int:
        """Unused ports inside the range. A reported shard may hold one outside it, which takes nothing."""
        low, high = self.port_low, self.port_high
        if not self.used_ports:
            return high - low + 1
        return high - low + 1 - sum(1 for p in self.used_ports if low <= p <= high)

    @cached_property
    def nvlink_key(self) -> tuple[tuple[int, frozenset[int]], ...] | None:
        """The NVLink map as a hashable value, or None when the topology is unknown."""
        if not self.topology_known():
            return None
        return tuple(sorted(self.peers().items()))

    def healthy_gpus(self, gpu_class: str | None) -> int:
        return sum(1 for g in self.gpus if g.offered_whole and (gpu_class is None or g.gpu_class == gpu_class))

    def topology_known(self) -> bool:
        return bool(self.gpus) and all(g.nvlink_peers is not None for g in self.gpus)

    def peers(self) -> dict[int, frozenset[int]]:
        return {g.index: frozenset(g.nvlink_peers or ()) for g in self.gpus}


@dataclass(frozen=True)
class Reservation:
    """What one shard of a just-placed replica takes from its node, until the next snapshot shows it placed."""

    node_id: str
    gpus: tuple[int, ...]
    memory: int  # bytes of host memory
    ports: tuple[int, ...]
    whole: bool  # a multi-node replica: the node is held whole


@dataclass(frozen=True)
class Snapshot:
    nodes: tuple[NodeView, ...]
    now: float

    def node(self, node_id: str) -> NodeView | None:
        for n in self.nodes:
            if n.id == node_id:
                return n
        return None

    def with_node(self, view: NodeView) -> Snapshot:
        """A snapshot with this view in place of the node's (a what-if for one node)."""
        return Snapshot(nodes=tuple(view if n.id == view.id else n for n in self.nodes), now=self.now)

    def with_reservation(self, replica_id: str, reservations: Iterable[Reservation]) -> Snapshot:
        """A snapshot in which what these reservations name is taken by the replica."""
        by_node = {r.node_id: r for r in reservations}
        nodes = []
        for n in self.nodes:
            r = by_node.get(n.id)
            if r is None:
                nodes.append(n)
                continue
            nodes.append(
                replace(
                    n,
                    used_gpus=n.used_gpus | frozenset(r.gpus),
                    mem_reserved=n.mem_reserved + r.memory,
                    used_ports=n.used_ports | frozenset(r.ports),
                    shard_count=n.shard_count + 1,
                    held_whole_by=replica_id if r.whole else n.held_whole_by,
                    _free_cache={},
                )
            )
        return Snapshot(nodes=tuple(nodes), now=self.now)


_by_index = attrgetter("index")


def build_snapshot(
    nodes: list[NodeRecord], replicas: list[ReplicaRecord], models: dict[str, ModelSpec], now: float
) -> Snapshot:
    """Fold replica assignments into node views. Failed replicas hold their cards until their shards are gone."""
    used: dict[str, set[int]] = {}
    mem: dict[str, int] = {}
    ports: dict[str, set[int]] = {}
    count: dict[str, int] = {}
    whole: dict[str, str] = {}
    for r in replicas:
        if r.released:
            continue  # failed, and its shards are gone: on view, holding nothing
        spec = models.get(r.model)
        memory = spec.profile.memory if spec else 0
        multi = len(r.assignments) > 1
        asleep = r.sleep_level > 0  # its GPUs are free: it stops if another takes them (reconcile/sleeping.py)
        if asleep:
            # what it holds asleep, where it is known (the sleep block's, or the weights' size)
            memory += (spec.sleep.host_memory or spec.size or 0) if spec and spec.sleep and r.sleep_level == 1 else 0
        for a in r.assignments:
            if asleep:
                mem[a.node_id] = mem.get(a.node_id, 0) + memory
                ports.setdefault(a.node_id, set()).update(a.ports())
                continue
            used.setdefault(a.node_id, set()).update(a.gpus)
            mem[a.node_id] = mem.get(a.node_id, 0) + memory
            ports.setdefault(a.node_id, set()).update(a.ports())
            count[a.node_id] = count.get(a.node_id, 0) + 1
            if multi:
                whole[a.node_id] = r.id
    held = _fabric_sources(nodes)
    views = []
    for rec in nodes:
        rep = rec.report
        views.append(
            NodeView(
                id=rec.id,
                address=rep.address,
                live=not rec.lost,
                not_live_reason=f"lost: silent since {rec.last_seen:.0f}" if rec.lost else "",
                engines_probed=rep.engines_probed,
                engines={e.name: e for e in rep.engines},
                install_progress=tuple(rep.install_progress),
                gpus=tuple(sorted(rep.hardware.gpus, key=_by_index)),  # report order must not matter
                used_gpus=frozenset(used.get(rec.id, ())),
                mem_total=rep.hardware.mem_total_bytes,
                mem_reserved=mem.get(rec.id, 0),
                fabrics={f.name: f for f in rep.fabrics},
                weights=frozenset(rep.weights),
                used_ports=frozenset(ports.get(rec.id, set()) | _reported_ports(rep)),
                port_low=rep.port_low,
                port_high=rep.port_high,
                shard_count=count.get(rec.id, 0),
                held_whole_by=whole.get(rec.id, ""),
                fabric_weights=frozenset().union(*(held.get(f.name, ()) for f in rep.fabrics)),
                wire_version=rep.version,
            )
        )
    views.sort(key=lambda v: v.id)
    return Snapshot(nodes=tuple(views), now=now)


def _fabric_sources(nodes: list[NodeRecord]) -> dict[str, set[str]]:
    """Per fabric, the sources its live nodes hold."""
    held: dict[str, set[str]] = {}
    for rec in nodes:
        if not rec.lost and rec.report.weights and rec.report.peer_port:  # a holder others can copy from
            for f in rec.report.fabrics:
                held.setdefault(f.name, set()).update(rec.report.weights)
    return held


def _reported_ports(rep: NodeReport) -> set[int]:
    """The ports of the shards a node reports, placed or not: an agent may still be stopping them."""
    return {int(port) for s in rep.shards if s.endpoint and (port := s.endpoint.rsplit(":", 1)[-1]).isdigit()}
