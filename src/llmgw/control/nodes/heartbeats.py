"""A node's heartbeat, taken in and answered: its report goes to the registry, its engines' gauges to the routers'
activity, what changed in it to the event log (within a budget per node), and it is told its desired state,
weights plans included (who fetches each remote file from its origin is kept here; a hub model named by its
resolved commit, control/hub/hub_models.py), and a renewal token. Until its report changes, the node sends a renewal
naming that token instead (wire/renewal.py): alive, its gauges, and its desired state only when it differs from the
one it holds; the record is written to the store only when the report says something new
(control/nodes/renewal_tokens.py)."""

from __future__ import annotations

from collections.abc import Callable

from llmgw.config.server import ServerConfig
from llmgw.control.activity.activity import Activity
from llmgw.control.hub.hub_models import HubModels
from llmgw.control.nodes.desired import desired_for, draining
from llmgw.control.nodes.fetch_leaders import FetchLeaders
from llmgw.control.nodes.registry import Registry, merge_report
from llmgw.control.nodes.release_digests import ReleaseDigests
from llmgw.control.nodes.renewal_tokens import KeptDesired, RenewalReply, RenewalTokens, drains_here
from llmgw.control.nodes.sleep_refusals import SleepRefusals
from llmgw.control.storage.storage import Storage
from llmgw.control.tenants.credentials import Credentials
from llmgw.core.buckets import Buckets
from llmgw.records.state import NodeRecord, ReplicaRecord
from llmgw.wire.messages import DesiredState, NodeReport, ShardState
from llmgw.wire.renewal import Renewal, RenewalAnswer, ShardLoad, report_digest

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


def led_here(node_id: str, shards: list[ShardState] | list[ShardLoad],
             replicas: dict[str, ReplicaRecord]) -> list[ShardState | ShardLoad]:
    """The shards among these that lead a replica on this node: a node's gauges steer routing for its own replicas
    only, never for one another node leads (or led, before it moved)."""
    out: list[ShardState | ShardLoad] = []
    for s in shards:
        r = replicas.get(s.replica_id)
        if r is not None and s.rank == 0 and any(a.node_id == node_id and a.rank == 0 for a in r.assignments):
            out.append(s)
    return out


class Heartbeats:
    def __init__(self, cfg: ServerConfig, storage: Storage, registry: Registry, activity: Activity,
                 credentials: Credentials, kick: Callable[[], None], hub: HubModels,
                 refusals: SleepRefusals | None = None, digests: ReleaseDigests | None = None) -> None:
        self.cfg = cfg
        self.clock = storage.clock
        self._engine_names, self._engine_sources = cfg.engine_names(), cfg.engine_sources()
        self._storage = storage
        self._registry = registry
        self._activity = activity
        self._credentials = credentials
        self._kick = kick
        self._hub = hub
        self._refusals = refusals or SleepRefusals()  # read: where an engine starts without sleep mode
        self._releases = digests or ReleaseDigests(self.clock)  # read: each release's digests, for the sources sent
        self.fetch_leaders = FetchLeaders()  # who fetches each remote file from its origin, per fabric
        self.renewal_tokens = RenewalTokens()  # tokens and the desired states kept (control/nodes/renewal_tokens.py)
        # per node, the record this server last made of a report and that report's digest: the digest stands for
        # the record the registry holds only while it is that record (another server's, a loss, replace it)
        self._digests: dict[str, tuple[NodeRecord, str]] = {}
        self._event_budget = Buckets(self.clock, 1.0 / NODE_EVENT_EVERY, NODE_EVENT_BURST)
        self._events_dropped: dict[str, int] = {}

    def heartbeat(self, report: NodeReport, serial: str = "", not_after: float | None = None) -> DesiredState:
        reg = self._registry
        now = self.clock.now()
        old = reg.nodes.get(report.node_id)
        if old is None or own_states(old.report, reg.replicas) != own_states(report, reg.replicas):
            self._kick()  # a shard of its own became ready (a cold start waits on it), failed or went: act now
        rec, events = merge_report(old, report, reg.models, now)
        rec = rec.model_copy(update={"cert_serial": serial, "cert_not_after": not_after})
        reg.node_reported(rec, changed=self._changed(old, rec))
        self._activity.loads_reported(led_here(report.node_id, report.shards, reg.replicas), reg.replicas)
        self._node_events(rec.id, events)
        self._hub.revision_gone(report)
        held = self._desired(rec.id)
        return held.desired.model_copy(update={"renewal_token": self.renewal_tokens.grant(rec.id),
                                                   "etag": held.etag})

    def _changed(self, old: NodeRecord | None, rec: NodeRecord) -> bool:
        """Whether the new record says anything the stored one does not, beyond what moves all the time (free
        memory and disk within a step, engines' gauges): only then is it written."""
        digest = report_digest(rec.report)
        held = self._digests.get(rec.id)
        before = held[1] if held is not None and held[0] is old else None  # else the record changed since
        self._digests[rec.id] = (rec, digest)
        if old is None or old.lost or old.revoked != rec.revoked or old.conditions != rec.conditions:
            return True
        if (old.cert_serial, old.cert_not_after) != (rec.cert_serial, rec.cert_not_after):
            return True  # a renewed certificate: the record names the one it speaks with now
        return (before or report_digest(old.report)) != digest

    def renew(self, renewal: Renewal, serial: str, not_after: float | None) -> RenewalReply:
        """A node's renewal: alive now, its gauges to the routers' activity; its desired state when the one it
        holds is not current. Or why it must send its report whole."""
        reg = self._registry
        node = renewal.node_id
        rec = reg.nodes.get(node)
        token = self.renewal_tokens.token(node)
        why = ""
        if rec is None or token is None:
            why = f"node {node}: this control plane holds no report of it (it restarted, or the node last " \
                  "reported to another server): send the report whole"
        elif token != renewal.token:
            why = f"node {node}: renewal token {renewal.token[:16]!r} is not the one this control plane last gave " \
                  "it (the node reported elsewhere since): send the report whole"
        elif rec.lost:
            why = f"node {node} is lost here: its report is taken whole on its return"
        elif (rec.cert_serial, rec.cert_not_after) != (serial, not_after):
            why = f"node {node} speaks with certificate {serial}, not {rec.cert_serial} of its last report: send " \
                  "the report whole so its record names the new one"
        if why:
            return RenewalReply(why=why)
        reg.renewed(node, self.clock.now())
        self._activity.loads_reported(led_here(node, renewal.loads, reg.replicas), reg.replicas)
        held = self._desired(node)
        if held.etag == renewal.etag:
            return RenewalReply(answer=self.renewal_tokens.unchanged(renewal.version))
        desired = held.desired.model_copy(update={"renewal_token": token, "etag": held.etag,
                                                  "version": renewal.version})
        return RenewalReply(answer=RenewalAnswer(version=renewal.version, desired=desired).model_dump_json())

    def _desired(self, node_id: str) -> KeptDesired:
        """The node's desired state: the one kept while every input of it is unchanged
        (control/nodes/renewal_tokens.py)."""
        reg = self._registry
        base = (reg.generation, reg.catalog_version, self._hub.version, self._credentials.revocations_version,
                self._releases.version)
        fabric = (reg.nodes_version, self.fetch_leaders.version)
        held = self.renewal_tokens.held(node_id, base, fabric)
        if held is not None:
            return held
        models = self._hub.pinned(reg.models)  # a hub model's shards name its resolved commit
        replicas = list(reg.replicas.values())
        revoked = frozenset(self._credentials.revoked_nodes) | frozenset(self._credentials.revoked_serials)
        plans = self.fetch_leaders.plans(node_id, reg.nodes, replicas, models, revoked, self._hub.plans())
        drains = drains_here(node_id, replicas)
        drain = draining(replicas, self._activity.outstanding(), self.clock.now(), self.cfg.drain_timeout) if drains \
            else set()
        desired = desired_for(
            node_id, replicas, models, self._engine_names, self.cfg.heartbeat_interval,
            self._releases.fill(self._engine_sources), plans, drain, self._refusals.known(),
        )
        desired.revoked = self._credentials.revoked()
        # the versions as they are now, after this derivation moved the fetch leaders (its own choice is in it)
        fabric = (reg.nodes_version, self.fetch_leaders.version)
        return self.renewal_tokens.keep(node_id, None if drains else base + (fabric if plans else ()), bool(plans),
                                        desired)

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
