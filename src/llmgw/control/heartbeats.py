"""A node's heartbeat, taken in and answered: its report goes to the registry, its engines' gauges to the routers'
activity, what changed in it to the event log (within a budget per node), and it is told its desired state,
weights plans included (who fetches each remote file from its origin is kept here; a hub model named by its
resolved commit, control/hub_models.py)."""

from __future__ import annotations

import asyncio

from llmgw.config.server import ServerConfig
from llmgw.control.activity import Activity
from llmgw.control.credentials import Credentials
from llmgw.control.desired import desired_for, draining
from llmgw.control.hub_models import HubModels
from llmgw.control.registry import Registry, merge_report
from llmgw.control.storage import Storage
from llmgw.control.weights import Leaders, plans_for, prune
from llmgw.core.buckets import Buckets
from llmgw.records.state import ReplicaRecord
from llmgw.wire.messages import DesiredState, NodeReport

NODE_EVENT_BURST = 30.0
NODE_EVENT_EVERY = 10.0


def own_states(report: NodeReport, replicas: dict[str, ReplicaRecord]) -> list[tuple[str, int, str]]:
    """The states of the shards this node reports that are placed on it: a node may not set the pace of passes by
    reporting shards that are not its own."""
    out: list[tuple[str, int, str]] = []
    for s in report.shards:
        r = replicas.get(s.replica_id)
        if r is not None and any(a.node_id == report.node_id and a.rank == s.rank for a in r.assignments):
            out.append((s.replica_id, s.rank, s.state))
    return out


class Heartbeats:
    def __init__(self, cfg: ServerConfig, storage: Storage, registry: Registry, activity: Activity,
                 credentials: Credentials, kick: asyncio.Event, hub: HubModels) -> None:
        self.cfg = cfg
        self.clock = storage.clock
        self._engine_names, self._engine_sources = cfg.engine_names(), cfg.engine_sources()
        self._storage = storage
        self._registry = registry
        self._activity = activity
        self._credentials = credentials
        self._kick = kick
        self._hub = hub
        # who fetches each remote file from its origin, per fabric (control/weights.py); soft state: after a
        # restart it is read again from what the nodes report fetching
        self.fetch_leaders: Leaders = {}
        self._event_budget = Buckets(self.clock, 1.0 / NODE_EVENT_EVERY, NODE_EVENT_BURST)
        self._events_dropped: dict[str, int] = {}

    def heartbeat(self, report: NodeReport, serial: str = "", not_after: float | None = None) -> DesiredState:
        reg = self._registry
        now = self.clock.now()
        old = reg.nodes.get(report.node_id)
        if old is None or own_states(old.report, reg.replicas) != own_states(report, reg.replicas):
            self._kick.set()  # a shard of its own became ready (a cold start waits on it), failed or went: act now
        rec, events = merge_report(old, report, reg.models, now)
        rec = rec.model_copy(update={"cert_serial": serial, "cert_not_after": not_after})
        reg.node_reported(rec)
        self._activity.loads_reported(report.shards, reg.replicas)
        self._node_events(rec.id, events)
        self._hub.revision_gone(report)
        models = self._hub.pinned(reg.models)  # a hub model's shards name its resolved commit
        replicas = list(reg.replicas.values())
        revoked = frozenset(self._credentials.revoked_nodes) | frozenset(self._credentials.revoked_serials)
        plans, chosen = plans_for(rec.id, reg.nodes, replicas, models, self.fetch_leaders, revoked, self._hub.plans())
        if chosen:
            self.fetch_leaders = prune({**self.fetch_leaders, **chosen}, reg.nodes,
                                       {m.source for m in models.values()})
        drain = draining(replicas, self._activity.outstanding(), self.clock.now(), self.cfg.drain_timeout)
        desired = desired_for(
            rec.id, replicas, models, self._engine_names, self.cfg.heartbeat_interval,
            self._engine_sources, plans, drain,
        )
        desired.revoked = self._credentials.revoked()
        return desired

    def _node_events(self, node_id: str, events: list[str]) -> None:
        """A node's changes go to the log, but no node can fill it: a budget of NODE_EVENT_BURST, refilled by one
        every NODE_EVENT_EVERY seconds; what it suppresses is counted in the next line that gets through."""
        for e in events:
            if not self._event_budget.take(node_id):
                self._events_dropped[node_id] = self._events_dropped.get(node_id, 0) + 1
                continue
            dropped = self._events_dropped.pop(node_id, 0)
            if dropped:
                e += f" ({dropped} earlier change(s) of this node not logged: too many)"
            self._storage.event("node", node_id, e)
