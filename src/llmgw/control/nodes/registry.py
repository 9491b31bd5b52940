"""The nodes and replicas this control plane knows, and the one place reconcile's intents are applied to them.

Nodes come as they report themselves (merge_report says what changed, in words an operator can act on); replicas
are written by the leader's passes. Readers learn that replicas changed from `generation` and the watch."""

from __future__ import annotations

import logging
import secrets
from collections import Counter
from collections.abc import Callable

from llmgw.api.router import ModelExplanation, ReadyReplica, ReplicaExplanation, Wanted
from llmgw.config.adapters import loaded_as_named
from llmgw.config.server import ModelSpec
from llmgw.control.activity.activity import Activity
from llmgw.control.nodes.watch import Watch
from llmgw.control.storage.leadership import Leadership
from llmgw.control.storage.storage import Storage
from llmgw.control.tenants.credentials import Credentials
from llmgw.placement.checks import Request, feasible
from llmgw.placement.snapshot import build_snapshot
from llmgw.reconcile import apply as effects
from llmgw.reconcile.intents import Intent, SetScaleTimer
from llmgw.reconcile.node_status import node_conditions
from llmgw.reconcile.scaling import Timer
from llmgw.records.state import NodeRecord, ReplicaRecord, leader_shard, replica_phase
from llmgw.wire.messages import NodeReport

log = logging.getLogger(__name__)


def qualifies(rec: NodeRecord, models: dict[str, ModelSpec], now: float) -> set[str]:
    """Models this node could take on its own, ignoring what already runs there."""
    view = build_snapshot([rec], [], models, now).nodes[0]
    return {name for name, m in models.items() if feasible(view, Request("", m)) is None}


def merge_report(
    old: NodeRecord | None, report: NodeReport, models: dict[str, ModelSpec], now: float
) -> tuple[NodeRecord, list[str]]:
    """The new record and what changed, in words an operator can act on."""
    conditions = node_conditions(old.conditions if old else [], report, lost=False, revoked="", now=now)
    rec = NodeRecord(
        id=report.node_id, report=report, first_seen=old.first_seen if old else now, last_seen=now, lost=False,
        conditions=conditions,
    )
    events: list[str] = []
    if old is None:
        gpus = len(report.hardware.gpus)
        events.append(f"node {report.node_id} registered from {report.address} with {gpus} GPU(s)")
    elif old.lost:
        events.append(f"node {report.node_id} is back after being lost")
    if old is not None and old.report.engines != report.engines:
        for e in report.engines:
            prev = next((o for o in old.report.engines if o.name == e.name), None)
            if prev != e:
                state = "runs" if e.runs else f"cannot run: {e.message}"
                events.append(f"node {report.node_id} now has {e.name} {e.version}: {state}")
    if old is not None and old.report.problems != report.problems:
        known = {(p.code, p.message) for p in old.report.problems}
        for p in report.problems:
            if (p.code, p.message) not in known:
                events.append(f"node {report.node_id}: {p.code}: {p.message}")
    if old is not None and _placement_facts(old.report) == _placement_facts(report):
        return rec, events  # most heartbeats: nothing placement reads has changed, so nothing new qualifies
    before = qualifies(old, models, now) if old is not None else set()
    gained = sorted(qualifies(rec, models, now) - before)
    if gained:
        events.append(f"node {report.node_id} now qualifies for {', '.join(gained)}")
    return rec, events


def _placement_facts(r: NodeReport) -> tuple[object, ...]:
    """What the feasibility checks read from a report (memory in use moves every heartbeat and is not among it)."""
    return (r.engines_probed, r.engines, r.install_progress, r.hardware.gpus, r.hardware.mem_total_bytes, r.fabrics,
            r.port_low, r.port_high)


class Registry:
    def __init__(self, storage: Storage, leadership: Leadership, activity: Activity, kick: Callable[[], None]
                 ) -> None:
        self.clock = storage.clock
        self._storage = storage
        self._leadership = leadership  # read: whether this server leads, and the epoch its writes are fenced by
        self._activity = activity
        self.models: dict[str, ModelSpec] = {}  # the catalog, filled at start (start()); read through catalogued()
        self._kick = kick  # asks for a pass before the next interval (nodes/kick.py)
        self.started_at = 0.0
        self.resumed_at = 0.0  # node silence counts from here: the start, a takeover, a stall
        self.nodes: dict[str, NodeRecord] = {}
        # when each node was last heard from (a full report or a renewal, here or, on a shared store, at
        # another server): kept in memory, never a store write of its own per heartbeat (wire/renewal.py)
        self.seen: dict[str, float] = {}
        # when each node was last heard by this server itself (what it shares with others on a shared store)
        self.heard_here: dict[str, float] = {}
        self.replicas: dict[str, ReplicaRecord] = {}
        self.generation = 0  # bumped when replicas change, so readers can cache derived tables
        self.catalog_version = 0  # bumped when the catalog is read: a desired state derived before is stale
        # bumped when a node record changes in what others read of it (a report that differs, lost, back, another
        # server's record): a weights plan reads the other nodes of a fabric (control/nodes/renewal_tokens.py)
        self.nodes_version = 0
        self.watch = Watch()  # agents waiting to hear that the shards they are to run changed
        # nodes whose record changed since the store last had it: written together at the end of each pass
        self._dirty: set[str] = set()
        # replicas started and stopped, and why: the metrics' loads, evictions and scale events
        self.replica_counts: Counter[tuple[str, str, str]] = Counter()  # (model, "start"|"stop", why)
        self.scale_timers: dict[str, Timer] = {}  # scaling on load: soft state, restarted with the process
        self.holding = ""  # why node losses are held, while they are

    # what the store holds
    def start(self, now: float, models: list[ModelSpec], nodes: list[NodeRecord]) -> None:
        """The catalog and the nodes the store holds; their silence counts from now, not from stale timestamps."""
        self.started_at = now
        self.models.clear()
        self.models.update({m.name: m for m in models})
        self.catalog_version += 1
        for n in nodes:
            self.nodes[n.id] = n.model_copy(update={"last_seen": now})
            self.seen[n.id] = now

    def adopt_replicas(self, records: list[ReplicaRecord]) -> None:
        """The replicas as the store has them: at start, and when this server begins to lead (the last leader's)."""
        self.replicas = {}
        for r in records:
            spec = self.models.get(r.model)
            if spec is not None:
                r = r.model_copy(update={"shards_expected": spec.profile.nodes})
            if not r.secret and self._leadership.leading:  # made before engines had secrets: its shards restart once
                r = r.model_copy(update={"secret": secrets.token_hex(32)})
                self._storage.writer.submit(self._storage.store.put_replica, r, self._leadership.epoch)
            self.replicas[r.id] = r

    def changed(self) -> None:
        """Replicas changed: routers and agents waiting on their shards hear of it."""
        self.generation += 1
        self.watch.changed()

    def replicas_from_store(self, records: list[ReplicaRecord]) -> None:
        """Another server's replicas taken as this one's (a follower's, a new leader's, a deposed one's)."""
        self.adopt_replicas(records)
        self.changed()

    def take_over(self, nodes: list[NodeRecord], replicas: list[ReplicaRecord]) -> None:
        """This server begins to lead: what the last leader left, with node silence counted from now."""
        now = self.clock.now()
        self.resumed_at = now
        for n in nodes:
            if n.id not in self.nodes:  # silence counts from resumed_at: when each known node was heard stays true
                self.nodes[n.id] = n.model_copy(update={"last_seen": now})
        self.replicas_from_store(replicas)
        self._kick()

    def resume(self) -> None:
        """Heartbeats may have gone unread (a stall): node silence counts from now."""
        self.resumed_at = self.clock.now()

    def heard_elsewhere(self, n: NodeRecord) -> None:
        """A node's report as another server sharing the store received it, unless this server heard it later."""
        mine = self.nodes.get(n.id)
        if mine is None or mine.last_seen <= n.last_seen:
            self.nodes[n.id] = n
            self._dirty.discard(n.id)
            self.nodes_version += 1
            self.renewed_elsewhere(n.id, n.last_seen)
        elif n.lost and not n.revoked and not mine.lost:
            # lost by a leader that had not heard what this server heard since: an unchanged report wrote no record
            # here, so write this one (later, not lost) for the leader to take, or the node stays lost there for good
            self._dirty.add(n.id)

    def renewed(self, node_id: str, at: float) -> None:
        """A node sent a renewal here: alive at `at`, its report as this server last took it."""
        self.seen[node_id] = self.heard_here[node_id] = at

    def renewed_elsewhere(self, node_id: str, at: float) -> None:
        """A node heard by another server sharing the store, at `at` (its clock): the later of the two counts."""
        if at > self.seen.get(node_id, 0.0):
            self.seen[node_id] = at

    def heard(self, node_id: str) -> float:
        """When this node was last heard from, here or elsewhere (0.0: never)."""
        n = self.nodes.get(node_id)
        return max(self.seen.get(node_id, 0.0), n.last_seen if n is not None else 0.0)

    # nodes
    def node_reported(self, rec: NodeRecord, changed: bool = True) -> None:
        """A node's report taken. Written to the store only when `changed` (what it says differs from the record
        before, beyond what moves all the time: wire/renewal.py's report_digest); else kept in memory only."""
        self.nodes[rec.id] = rec
        self.seen[rec.id] = max(self.seen.get(rec.id, rec.last_seen), rec.last_seen)
        self.heard_here[rec.id] = rec.last_seen
        if changed:
            self._dirty.add(rec.id)  # written with the next pass: one transaction for every node heard from since
            self.nodes_version += 1

    def cut_off(self, node_id: str, reason: str) -> None:
        """A node revoked: lost now, so its replicas are rebuilt elsewhere."""
        n = self.nodes.get(node_id)
        if n is not None:
            self._set_node(n, lost=True, revoked=reason or "revoked")

    def _set_node(self, n: NodeRecord, *, lost: bool, revoked: str) -> None:
        conds = node_conditions(n.conditions, n.report, lost=lost, revoked=revoked, now=self.clock.now())
        self.nodes[n.id] = n.model_copy(update={"lost": lost, "revoked": revoked, "conditions": conds})
        self._dirty.add(n.id)
        self.nodes_version += 1

    def persist_nodes(self) -> None:
        """The records that changed since the last write, in one transaction; each as last heard (a renewal
        moves no record's last_seen in memory, so a node lost says when it was last heard, not last reported)."""
        if self._dirty:
            batch = [self._as_heard(self.nodes[n]) for n in sorted(self._dirty) if n in self.nodes]
            self._dirty.clear()
            self._storage.writer.submit(self._storage.store.put_nodes, batch)

    def persist_heard_here(self, since: float) -> float:
        """For a leader of a release before renewals, which counts a node's silence from its record: the records of
        the nodes this server heard itself after `since`, each as heard, in one transaction. The newest hearing."""
        heard = {n: t for n, t in self.heard_here.items() if t > since and n in self.nodes}
        batch = [self._as_heard(self.nodes[n]) for n in sorted(heard)]
        if batch:
            self._storage.writer.submit(self._storage.store.put_nodes, batch)
        return max(heard.values(), default=since)

    def _as_heard(self, n: NodeRecord) -> NodeRecord:
        heard = self.seen.get(n.id, 0.0)
        return n.model_copy(update={"last_seen": heard}) if heard > n.last_seen else n

    def node_digest(self, node_id: str) -> str:
        """What the shards this node is to run look like now (control/nodes/watch.py)."""
        return self.watch.digest(node_id, self.generation, self.replicas.values())

    # reconcile's intents
    def apply(self, intents: list[Intent]) -> None:
        """Carry out a pass's intents: reconcile.apply decides what they change; this writes it."""
        state = effects.State(now=self.clock.now(), models=self.models, nodes=self.nodes, replicas=self.replicas,
                              demand=self._activity.demand, holding=self.holding, scale_timers=self.scale_timers)
        changed = False
        for e in effects.apply(state, intents).effects:
            if isinstance(e, effects.WriteReplica):
                self.replicas[e.record.id] = e.record
                self._storage.writer.submit(self._storage.store.put_replica, e.record, self._leadership.epoch)
                changed = True
            elif isinstance(e, effects.DeleteReplica):
                self.replicas.pop(e.replica_id, None)
                self._storage.writer.submit(self._storage.store.delete_replica, e.replica_id, self._leadership.epoch)
                self._activity.forget(e.replica_id)
                changed = True
            elif isinstance(e, effects.WriteNode):
                self.nodes[e.record.id] = self._as_heard(e.record)
                self._dirty.add(e.record.id)
                self.nodes_version += 1
            elif isinstance(e, effects.Log):
                if e.warn:
                    log.warning("%s", e.message)
                self._storage.event(e.kind, e.subject, e.message)
            elif isinstance(e, effects.Count):
                self.replica_counts[(e.model, e.what, e.why)] += 1
            elif isinstance(e, effects.Served):
                self._activity.met(e.model)  # the request that asked for a load has its replica
            elif isinstance(e, effects.Holding):
                self.holding = e.message
            elif isinstance(e, SetScaleTimer):
                self.scale_timers[e.model] = e.timer
        if changed:
            self.changed()

    # what readers ask
    def catalogued(self, model: str) -> bool:
        """Whether the catalog has this model (the routers' demand counts only for those)."""
        return model in self.models

    def ready_table(self) -> dict[str, list[ReadyReplica]]:
        ready: dict[str, list[ReadyReplica]] = {}
        for r in self.replicas.values():
            if r.ready and r.endpoint:
                held = leader_shard(r, self.nodes)  # what it says of its engine: connections, slots
                if not loaded_as_named(self.models.get(r.model), held[1] if held is not None else None):
                    continue  # its engine has other LoRA adapters than its model now: restarted with these first
                ready.setdefault(r.model, []).append(ReadyReplica(
                    id=r.id, endpoint=r.endpoint, secret=r.secret,
                    closes_after_stream=held is not None and held[1].closes_after_stream,
                    slots=held[1].slots if held is not None else None))
        return ready

    def ready_replicas(self, model: str) -> list[ReplicaRecord]:
        return [r for r in self.replicas.values() if r.model == model and r.ready and r.endpoint]

    def explain(self, model: str) -> ModelExplanation:
        spec = self.models.get(model)
        reps = sorted((r for r in self.replicas.values() if r.model == model), key=lambda r: r.id)
        if spec is None and not reps:
            return ModelExplanation(model=model, wanted=Wanted.Unknown)
        wanted = Wanted.Replicas if reps else (Wanted.Off if spec and spec.scaling.max == 0 else Wanted.NotWanted)
        return ModelExplanation(
            model=model, wanted=wanted, min=spec.scaling.min if spec else 0, max=spec.scaling.max if spec else 0,
            on_demand=spec.on_demand if spec else False, priority=spec.rank if spec else 0,
            pinned=spec.pinned if spec else False,
            replicas=[ReplicaExplanation(id=r.id, phase=replica_phase(r), nodes=r.node_ids(), conditions=r.conditions,
                                         stop=r.stop, placement=r.explanation) for r in reps],
        )


async def revoke_node(credentials: Credentials, registry: Registry, storage: Storage, node_id: str, serial: str,
                      reason: str) -> str:
    """A node (serial "") or one certificate cut off: kept by the credentials, and a whole node lost now in the
    registry, so its replicas are rebuilt elsewhere; a watch it holds is let go. What it says."""
    msg = await credentials.revoke(node_id, serial, reason)
    if not serial:
        registry.cut_off(node_id, reason)
    storage.event("node", node_id, msg)
    registry.watch.changed()  # a watch it holds is let go now, not at the end of its hold
    return msg
