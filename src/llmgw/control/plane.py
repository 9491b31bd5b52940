"""The control plane's state and its one reconcile pass. All writes to records go through here."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from llmgw.config.server import ModelSpec, ServerConfig
from llmgw.control.desired import desired_for, draining
from llmgw.control.leadership import Leadership, Turn, holder_id
from llmgw.control.metrics import Gauges
from llmgw.control.quotas import Quotas
from llmgw.control.registry import merge_report
from llmgw.control.sharing import SERVER, Sharing
from llmgw.control.summary import DAY, NodeFacts, leader_shard, node_facts
from llmgw.control.usage_book import UsageBook
from llmgw.control.watch import Watch
from llmgw.control.weights import Leaders, plans_for, prune
from llmgw.control.writer import InlineWriter, StoreWriter
from llmgw.core import quota
from llmgw.core.buckets import Buckets
from llmgw.core.clock import Clock
from llmgw.core.errors import StoreError
from llmgw.core.state import Event, NodeRecord, ReplicaRecord, replica_phase
from llmgw.reconcile import apply as effects
from llmgw.reconcile.intents import Intent, SetScaleTimer
from llmgw.reconcile.node_status import node_conditions
from llmgw.reconcile.reconcile import reconcile
from llmgw.reconcile.scaling import Timer
from llmgw.reconcile.world import Timings, World
from llmgw.router.keys import new_key
from llmgw.store.base import HOUR, AnyUsage, ApiKeyRecord, Lease, Revocation, Store, UsageTotal
from llmgw.wire.messages import DesiredState, EngineLoad, NodeReport
from llmgw.wire.router import Activity, ModelExplanation, ReadyReplica, ReplicaExplanation, Wanted
from llmgw.wire.stats import RouterStats

log = logging.getLogger(__name__)
T = TypeVar("T")
LOCAL = "local"  # the router in the control plane's own process
REPORTER_SILENT_AFTER = 30.0  # a worker whose last report is older is gone: its in-flight counts no longer count
MAX_REPORTERS = 1024  # router processes whose measurements are kept one by one (a few per server in practice)
BUDGETS_REREAD_S = 10.0  # on a shared store, what keys spent is read again this often (others' usage, as recorded)
ACTIVITY_SLACK_S = 10.0  # others' activity is read from this long before the last read (their clocks, their commits)
STALL_AFTER = 5.0  # seconds between passes beyond which the control plane counts itself as having stalled
NODE_EVENT_BURST = 30.0
NODE_EVENT_EVERY = 10.0


class ControlPlane:
    def __init__(
        self,
        cfg: ServerConfig,
        store: Store,
        clock: Clock,
        timings: Timings | None = None,
        writer: InlineWriter | StoreWriter | None = None,
    ) -> None:
        self.cfg = cfg
        self._engine_names, self._engine_sources = cfg.engine_names(), cfg.engine_sources()
        self.store = store
        self.writer = writer or InlineWriter()  # the server passes a StoreWriter: no write on the event loop
        self.clock = clock
        self.timings = timings or Timings(
            node_lost_after=cfg.node_lost_after,
            evict_idle_after=cfg.eviction.idle_after,
            evict_protect=cfg.eviction.protect_after_ready,
            demand_window=max(60.0, 4 * cfg.load_wait),
            loss_grace=min(cfg.node_lost_after / 2, max(1.0, 2 * cfg.heartbeat_interval)),
            keep_failed=cfg.failed_kept_for,
        )
        self.started_at = 0.0
        self.models: dict[str, ModelSpec] = {}
        self.nodes: dict[str, NodeRecord] = {}
        self.replicas: dict[str, ReplicaRecord] = {}
        self.demand: dict[str, float] = {}
        self.last_used: dict[str, float] = {}
        # requests in flight per replica, per reporter (this process's router, each API worker): summed, never
        # overwritten, so a replica busy in one worker does not look idle because another worker has none on it
        self.in_flight_by: dict[str, dict[str, int]] = {}
        self._heard_at: dict[str, float] = {}
        self.generation = 0  # bumped when replicas change, so readers can cache derived tables
        self.watch = Watch()  # agents waiting to hear that the shards they are to run changed
        # set when a pass is worth running before the next interval: a request asks for a model not loaded, or a
        # node reports a shard ready or gone (a cold start waits on both)
        self.kick = asyncio.Event()
        # who fetches each remote file from its origin, per fabric (control/weights.py); soft state: after a
        # restart it is read again from what the nodes report fetching
        self.fetch_leaders: Leaders = {}
        self.keys_version = 0  # bumped when API keys change, so routers reload them
        self.revoked_nodes: dict[str, Revocation] = {}
        self.revoked_serials: dict[str, Revocation] = {}
        # nodes whose record changed since the store last had it: written together at the end of each pass
        self._dirty: set[str] = set()
        self._event_budget = Buckets(clock, 1.0 / NODE_EVENT_EVERY, NODE_EVENT_BURST)
        self._events_dropped: dict[str, int] = {}
        self._last_pass: float | None = None
        self.passes = 0  # reconcile passes done: until the first, the summary describes nothing yet
        self.resumed_at = 0.0
        self.holding = ""  # why node losses are held, while they are
        # what router processes measured: this process's router read live, the others' last cumulative reports,
        # and what silent reporters had counted (their counters stay; their requests in flight do not)
        self._facts: dict[str, tuple[NodeRecord, NodeFacts]] = {}  # what the summary derives of each node record
        self.engine_loads: dict[str, EngineLoad] = {}  # replica id -> its leading shard's gauges, last reported
        self._local_stats: Callable[[], RouterStats] | None = None
        self._reported_stats: dict[str, RouterStats] = {}
        self._retired_stats = RouterStats()
        # replicas started and stopped, and why: the metrics' loads, evictions and scale events
        self.replica_counts: Counter[tuple[str, str, str]] = Counter()  # (model, "start"|"stop", why)
        self.scale_timers: dict[str, Timer] = {}  # scaling on load: soft state, restarted with the process
        self.usage = UsageBook()  # totals per key and model, all-time and by the hour: the summary's usage
        self._keys: tuple[int, dict[str, ApiKeyRecord], dict[str, str]] = (-1, {}, {})
        self.quotas = Quotas(clock, cfg.router.default_limits)  # every key's counters against its limits
        self._keys_lock = asyncio.Lock()  # a key's read-modify-write (update, revoke) is never interleaved
        # whether this server reconciles: the lease in the store (control/leadership.py); every server serves
        self.leadership = Leadership(holder_id(), cfg.leader_lease)
        self.shared = cfg.store.kind == "postgres"  # other servers may write the store: follow what they write
        self._revs: dict[str, int] = {}  # the store's revisions as last followed
        self._sharing = Sharing()  # what this server's routers saw, written for the leader (control/sharing.py)
        self._reads_failing_since: float | None = None  # monotonic time store reads began to fail
        self._activity_read_at: float | None = None  # when the others' activity was last read (None: read a day's)
        self._budgets_read_at = 0.0  # monotonic time keys' spending was last read from the store (shared stores)
        self.gauges: Gauges = {
            "llmgw_store_writes_queued": ("Store writes waiting for the writer (grows while the store fails)",
                                          lambda: float(self.writer.pending())),
            "llmgw_store_unreachable_seconds": ("How long the store has failed writes or reads (0: they work); "
                                                "serving goes on meanwhile", self.store_failing_for),
        }

    def _adopt_replicas(self, records: list[ReplicaRecord]) -> None:
        """The replicas as the store has them: at start, and when this server begins to lead (the last leader's)."""
        self.replicas = {}
        for r in records:
            spec = self.models.get(r.model)
            if spec is not None:
                r = r.model_copy(update={"shards_expected": spec.profile.nodes})
            if not r.secret and self.leading:  # made before engines had secrets: its shards restart once, with one
                r = r.model_copy(update={"secret": secrets.token_hex(32)})
                self.writer.submit(self.store.put_replica, r, self.leadership.epoch)
            self.replicas[r.id] = r

    def _replicas_from_store(self, records: list[ReplicaRecord]) -> None:
        """Another server's replicas taken as this one's (a follower's, a new leader's, a deposed one's): routers and
        agents waiting on their shards hear of them."""
        self._adopt_replicas(records)
        self.generation += 1
        self.watch.changed()

    def _adopt_revocations(self, records: list[Revocation]) -> None:
        for rv in records:
            (self.revoked_serials if rv.serial else self.revoked_nodes)[rv.serial or rv.node_id] = rv

    @property
    def leading(self) -> bool:
        return self.leadership.leading

    async def hold_lease(self) -> None:
        """Renew the lease, or take it once it has expired (the server calls this every third of a lease). Taking
        it over, this server adopts the replicas the last leader wrote, and node silence counts from now: no node
        is declared lost because the leader changed."""
        try:
            lease = await self.read(self.store.lead, self.leadership.holder, self.leadership.epoch,
                                    self.clock.now(), self.leadership.ttl)
        except StoreError as e:
            if self.leadership.unreachable(self.clock.now()) == Turn.Lost:
                self.event("control", "plane", f"this server stops reconciling: its lease ran out while the store "
                           f"was unreachable ({e})")
            return
        if lease.holder == self.leadership.holder and not self.leading:
            # taking over: what the last leader left is read first, and this server leads only once it has it (a
            # pass in between would be a leader's pass over a follower's view, counting silence from before)
            replicas, nodes = await self.read(self.store.list_replicas), await self.read(self.store.list_nodes)
            if self._lease_seen(lease) != Turn.Gained:
                return
            self._activity_read_at = None  # the others' demand and use since long before, as a leader needs them
            now = self.clock.now()
            self.resumed_at = now
            for n in nodes:
                if n.id not in self.nodes:
                    self.nodes[n.id] = n.model_copy(update={"last_seen": now})
            self._replicas_from_store(replicas)
            self.kick.set()
        elif self._lease_seen(lease) == Turn.Lost:
            # deposed: what it believed (writes the store may have refused) gives way to what the store holds
            self._replicas_from_store(await self.read(self.store.list_replicas))

    async def follow_store(self) -> None:
        """What the other servers sharing the store wrote (the server calls this before each pass): the reports of
        nodes that talk to them, the leader's replicas (a follower's), and keys. Nothing when alone on the store."""
        if not self.shared:
            return
        revs = await self.read(self.store.revs)
        seen = self._revs
        if revs.get("nodes", 0) > seen.get("nodes", 0):
            for n in await self.read(self.store.nodes_since, seen.get("nodes", 0)):
                mine = self.nodes.get(n.id)
                if mine is None or mine.last_seen <= n.last_seen:  # unless this server heard it later itself
                    self.nodes[n.id] = n
                    self._dirty.discard(n.id)
        if not self.leading and revs.get("replicas", 0) != seen.get("replicas", 0):
            self._replicas_from_store(await self.read(self.store.list_replicas))
        if revs.get("keys", 0) != seen.get("keys", 0):
            self.keys_version += 1  # routers read keys again: one was made, changed or revoked through another server
        if revs.get("revocations", 0) != seen.get("revocations", 0):  # a node cut off through another server
            self._adopt_revocations(await self.read(self.store.list_revocations))
            self.watch.changed()  # a watch it holds is let go: its next heartbeat is refused
        self._revs = revs
        mono = self.clock.monotonic()
        if mono - self._budgets_read_at >= BUDGETS_REREAD_S:  # what every server's requests spent, as recorded
            self._budgets_read_at = mono
            await self.seed_budgets()

    async def seed_budgets(self) -> None:
        """What keys spent, read again from the store (kept where more than counted here): on a shared store
        every so often, and once usage a dead process journaled has been recorded."""
        for period, start, spent in await self.read(self._spent_by_period, self.clock.now(), None):
            self.quotas.seed(period, start, spent)

    async def share_activity(self) -> None:
        """On a shared store, write what this server's routers saw (demand, use, requests in flight) and its keys'
        use against their limits; take in the others' keys' use, and, leading, what their routers saw (the server
        calls this before each pass). Rows are read from a little before the last read on (a full day's after
        taking the lead: replicas used long ago count for idle eviction)."""
        if not self.shared:
            return
        now = self.clock.now()
        rows = self._sharing.rows(self.demand, self.last_used, self.outstanding(own=True), now, self.quotas.shared())
        if rows:
            self.writer.submit(self.store.put_activity, self.leadership.holder, rows)
        since = now - DAY if self._activity_read_at is None else self._activity_read_at - ACTIVITY_SLACK_S
        seen = self._sharing.others(await self.read(self.store.activity, since), self.leadership.holder, now,
                                    REPORTER_SILENT_AFTER)
        self.quotas.absorb(seen.keys, now, REPORTER_SILENT_AFTER, first=self._activity_read_at is None)
        self._activity_read_at = now
        if not self.leading:
            return
        for model, at in seen.demand.items():
            if model in self.models and at > self.demand.get(model, 0.0):
                self.demand[model] = at
        for rid, at in seen.used.items():
            self.used(rid, at)
        mono = self.clock.monotonic()
        for reporter, counts in seen.in_flight.items():  # heard when the row was written, not when it was read
            self.in_flight(reporter, counts, whole=True, heard=mono - max(0.0, now - seen.heard.get(reporter, now)))

    def release_lease(self) -> None:
        """A server stopping gives its lease up (after its last writes), so another leads at once."""
        if self.leadership.epoch is not None:
            self.store.release(self.leadership.holder, self.leadership.epoch)

    def _lease_seen(self, lease: Lease) -> Turn:
        turn = self.leadership.seen(lease)
        if turn == Turn.Gained:
            self.event("control", "plane", f"this server leads: it reconciles (epoch {lease.epoch})")
        elif turn == Turn.Lost:
            self.event("control", "plane", f"this server no longer leads: {lease.holder} does (epoch {lease.epoch})")
        return turn

    def store_failing_for(self) -> float:
        """Seconds since the store began failing writes (the writer says when) or reads; 0 while they work."""
        starts = [t for t in (getattr(self.writer, "failing_since", None), self._reads_failing_since) if t is not None]
        return 0.0 if not starts else max(0.0, self.clock.monotonic() - min(starts))

    def table_stale_for(self) -> float:
        """Seconds this server's view of replicas has gone unconfirmed: reads of the shared store failing (writes
        failing while reads work confirm it all the same; alone on its store, a server's memory is the truth)."""
        since = self._reads_failing_since
        return max(0.0, self.clock.monotonic() - since) if self.shared and since is not None else 0.0

    def health(self) -> dict[str, object]:
        """What /health says: whether the store answers, who leads. Serving goes on while the store is away, so a
        server whose store is unreachable is degraded, not down."""
        down, stale = self.store_failing_for(), self.table_stale_for()
        lease = self.leadership.lease
        return {
            "status": "ok" if down == 0 else "degraded",
            "store": {"kind": self.cfg.store.kind, "reachable": down == 0, "unreachable_seconds": round(down, 1),
                      **({"words": f"the store has failed for {down:.0f}s: serving goes on from what this server "
                                   "knows; no placement happens until it is back"} if down else {})},
            # no holder names: /health answers anyone (a load balancer's probe), and names say host and pid
            "routing": {"stale_seconds": round(stale, 1), "serves_stale_for": self.cfg.router.serve_stale_for,
                        "refusing": stale > self.cfg.router.serve_stale_for},
            "leader": {"leading": self.leading, "epoch": lease.epoch if lease else 0,
                       "elsewhere": bool(lease and lease.holder and not self.leading and lease.expires_at
                                         >= self.clock.now())},
        }

    def load(self) -> None:
        """Adopt what the store holds. Timers for silent nodes restart now, not from stale timestamps."""
        now = self.clock.now()
        self.started_at = now
        self.store.put_models(self.cfg.models)
        self.models = {m.name: m for m in self.cfg.models}
        self._adopt_revocations(self.store.list_revocations())
        revs = self.store.revs()  # before the records: a change between the two is read again, never missed
        for n in self.store.list_nodes():
            self.nodes[n.id] = n.model_copy(update={"last_seen": now})
        totals = self.store.usage_totals()
        self.usage.load(totals, self.store.usage_by_hour(now - DAY - HOUR))
        for period, start, spent in self._spent_by_period(now, totals):  # what keys spent before, for budgets
            self.quotas.seed(period, start, spent)
        # a SQLite store is one server's (its file is locked: store/opening.py), so its lease is taken at once, even
        # one a crashed previous life left unexpired; on PostgreSQL another server may hold it
        self._lease_seen(self.store.lead(self.leadership.holder, None, now, self.leadership.ttl,
                                         force=not self.shared))
        self._adopt_replicas(self.store.list_replicas())
        self._revs = revs
        self.generation += 1
        self.watch.changed()
        self.event(
            "control",
            "plane",
            f"started with {len(self.nodes)} node(s), {len(self.replicas)} replica(s), {len(self.models)} model(s)",
        )

    def event(self, kind: str, subject: str, message: str) -> None:
        log.info("%s", message)
        event = Event(at=self.clock.now(), kind=kind, subject=subject, message=message)
        self.writer.submit(self.store.add_event, event)

    def refusal(self, node_id: str, serial: str) -> str:
        """Why this node, speaking with this certificate, is cut off; "" when it is not."""
        rv = self.revoked_nodes.get(node_id)
        if rv is not None:
            return f"node {node_id} is revoked" + (f": {rv.reason}" if rv.reason else "")
        rv = self.revoked_serials.get(serial)  # a serial names one certificate, whatever node it is said to be for
        if rv is not None:
            return f"certificate {serial} of node {node_id} is revoked" + (f": {rv.reason}" if rv.reason else "")
        return ""

    async def revoke(self, node_id: str, serial: str, reason: str) -> str:
        """Cut a node off (serial "") or one of its certificates. Takes effect at its next heartbeat; revoking the
        whole node also fails its replicas now, so they are rebuilt elsewhere. Written before anything changes: the
        operator is told it is done only once it outlives a restart (the store's failure is raised)."""
        rv = Revocation(node_id=node_id, serial=serial, at=self.clock.now(), reason=reason)
        await self.writer.run(self.store.put_revocation, rv)
        if serial:
            self.revoked_serials[serial] = rv
            msg = f"certificate {serial} of node {node_id} revoked" + (f": {reason}" if reason else "")
        else:
            self.revoked_nodes[node_id] = rv
            msg = f"node {node_id} revoked" + (f": {reason}" if reason else "")
            n = self.nodes.get(node_id)
            if n is not None:
                self._set_node(n, lost=True, revoked=reason or "revoked")
        self.event("node", node_id, msg)
        self.watch.changed()  # a watch it holds is let go now, not at the end of its hold
        return msg

    def heartbeat(self, report: NodeReport, serial: str = "", not_after: float | None = None) -> DesiredState:
        now = self.clock.now()
        old = self.nodes.get(report.node_id)
        if old is None or self._own_states(old.report) != self._own_states(report):
            self.kick.set()  # a shard of its own became ready (a cold start waits on it), failed or went: act now
        rec, events = merge_report(old, report, self.models, now)
        rec = rec.model_copy(update={"cert_serial": serial, "cert_not_after": not_after})
        self.nodes[rec.id] = rec
        self.node_facts(rec)  # derived now, once per report, not at every page view and scrape
        for sh in report.shards:  # what routers weigh replicas by: the leading shard's engine gauges
            if sh.rank == 0 and sh.replica_id in self.replicas:
                if sh.load is not None:
                    self.engine_loads[sh.replica_id] = sh.load
                else:
                    self.engine_loads.pop(sh.replica_id, None)
        self._dirty.add(rec.id)  # written with the next pass: one transaction for every node heard from since
        self._node_events(rec.id, events)
        replicas = list(self.replicas.values())
        revoked = frozenset(self.revoked_nodes) | frozenset(self.revoked_serials)
        plans, chosen = plans_for(rec.id, self.nodes, replicas, self.models, self.fetch_leaders, revoked)
        if chosen:
            self.fetch_leaders = prune({**self.fetch_leaders, **chosen}, self.nodes,
                                       {m.source for m in self.models.values()})
        drain = draining(replicas, self.outstanding(), self.clock.now(), self.cfg.drain_timeout)
        desired = desired_for(
            rec.id, replicas, self.models, self._engine_names, self.cfg.heartbeat_interval,
            self._engine_sources, plans, drain,
        )
        desired.revoked = sorted(self.revoked_nodes) + sorted(self.revoked_serials)
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
            self.event("node", node_id, e)

    def node_facts(self, rec: NodeRecord) -> NodeFacts:
        """The summary's facts of a node record, derived once per record (a node's record changes when it reports
        or is lost): at 1,000 nodes deriving them costs more than the rest of a page view."""
        held = self._facts.get(rec.id)
        if held is not None and held[0] is rec:
            return held[1]
        f = node_facts(rec)
        self._facts[rec.id] = (rec, f)
        return f

    def world(self) -> World:
        return World(
            now=self.clock.now(),
            started_at=self.started_at,
            models=self.models,
            nodes=list(self.nodes.values()),
            replicas=list(self.replicas.values()),
            demand=dict(self.demand),
            last_used=dict(self.last_used),
            outstanding=self.outstanding(),
            timings=self.timings,
            entropy=secrets.token_bytes(32),
            resumed_at=self.resumed_at,
            scale_timers=dict(self.scale_timers),
        )

    def reconcile_once(self) -> list[Intent]:
        """One pass, by the leader only (a follower's would be writes the store refuses)."""
        if not self.leading:
            self._last_pass = None  # a gap while following is not a stall
            self.persist_nodes()  # the reports this server received: every server writes the nodes it hears
            self.passes += 1  # what it shows is what it knows
            return []
        self._notice_stall()
        intents = reconcile(self.world())
        self.apply(intents)
        self.persist_nodes()
        self.passes += 1
        return intents

    def _notice_stall(self) -> None:
        """A pass far later than its interval means this process was stopped or starved: heartbeats that arrived
        meanwhile may not have been read, so node silence is counted from now."""
        mono = self.clock.monotonic()
        last, self._last_pass = self._last_pass, mono
        if last is None:
            return
        gap = mono - last
        if gap > max(STALL_AFTER, 5 * self.cfg.reconcile_interval):
            self.resumed_at = self.clock.now()
            self.event("control", "plane", f"the control plane stalled for {gap:.0f}s: node silence counts from now")

    def _set_node(self, n: NodeRecord, *, lost: bool, revoked: str) -> None:
        conds = node_conditions(n.conditions, n.report, lost=lost, revoked=revoked, now=self.clock.now())
        self.nodes[n.id] = n.model_copy(update={"lost": lost, "revoked": revoked, "conditions": conds})
        self._dirty.add(n.id)

    def persist_nodes(self) -> None:
        if self._dirty:
            batch = [self.nodes[n] for n in sorted(self._dirty) if n in self.nodes]
            self._dirty.clear()
            self.writer.submit(self.store.put_nodes, batch)

    def apply(self, intents: list[Intent]) -> None:
        """Carry out a pass's intents: reconcile.apply decides what they change; this writes it."""
        state = effects.State(now=self.clock.now(), models=self.models, nodes=self.nodes, replicas=self.replicas,
                            demand=self.demand, holding=self.holding, scale_timers=self.scale_timers)
        changed = False
        for e in effects.apply(state, intents).effects:
            if isinstance(e, effects.WriteReplica):
                self.replicas[e.record.id] = e.record
                self.writer.submit(self.store.put_replica, e.record, self.leadership.epoch)
                changed = True
            elif isinstance(e, effects.DeleteReplica):
                self.replicas.pop(e.replica_id, None)
                self.writer.submit(self.store.delete_replica, e.replica_id, self.leadership.epoch)
                self.last_used.pop(e.replica_id, None)
                self.engine_loads.pop(e.replica_id, None)
                for counts in self.in_flight_by.values():
                    counts.pop(e.replica_id, None)
                changed = True
            elif isinstance(e, effects.WriteNode):
                self.nodes[e.record.id] = e.record
                self._dirty.add(e.record.id)
            elif isinstance(e, effects.Log):
                if e.warn:
                    log.warning("%s", e.message)
                self.event(e.kind, e.subject, e.message)
            elif isinstance(e, effects.Count):
                self._count(e)
            elif isinstance(e, effects.Served):
                self.demand.pop(e.model, None)  # the request that asked for a load has its replica
            elif isinstance(e, effects.Holding):
                self.holding = e.message
            elif isinstance(e, SetScaleTimer):
                self.scale_timers[e.model] = e.timer
        if changed:
            self.generation += 1
            self.watch.changed()

    def _count(self, c: effects.Count) -> None:
        self.replica_counts[(c.model, c.what, c.why)] += 1

    # what the router tells us
    def attach_router(self, stats: Callable[[], RouterStats]) -> None:
        """A router in this process: its measurements are read when asked for, not reported."""
        self._local_stats = stats

    def request_stats(self) -> RouterStats:
        """Every router process's measurements, summed. A process's counts are cumulative and stay counted after it
        falls silent (a worker idle for a while sends nothing, and may speak again: its next report replaces its
        last, never adds to it); its requests in flight count only while it is heard from."""
        now = self.clock.monotonic()
        total = RouterStats()
        total.add(self._retired_stats)
        if self._local_stats is not None:
            total.add(self._local_stats())
        for reporter, st in self._reported_stats.items():
            silent = now - self._heard_at.get(reporter, now) > REPORTER_SILENT_AFTER
            total.add(st.counters_only() if silent else st)
        return total

    def _keep_stats(self, reporter: str, stats: RouterStats) -> None:
        if reporter not in self._reported_stats and len(self._reported_stats) >= MAX_REPORTERS:
            # bounded: the longest-silent process is taken as gone for good and its counts kept in one sum
            gone = min(self._reported_stats, key=lambda r: self._heard_at.get(r, 0.0))
            self._retired_stats.add(self._reported_stats.pop(gone).counters_only())
        self._reported_stats[reporter] = stats

    def want(self, model: str) -> None:
        if model not in self.demand:
            self.kick.set()  # a load asked for now is placed now, not at the next pass
        self.demand[model] = self.clock.now()

    def take_kick(self) -> bool:
        """Whether a pass was asked for since the last time this was asked (the reconcile loop's question)."""
        kicked = self.kick.is_set()
        self.kick.clear()
        return kicked

    def _own_states(self, report: NodeReport) -> list[tuple[str, int, str]]:
        """The states of the shards this node reports that are placed on it: a node may not set the pace of passes
        by reporting shards that are not its own."""
        out: list[tuple[str, int, str]] = []
        for s in report.shards:
            r = self.replicas.get(s.replica_id)
            if r is not None and any(a.node_id == report.node_id and a.rank == s.rank for a in r.assignments):
                out.append((s.replica_id, s.rank, s.state))
        return out

    def node_digest(self, node_id: str) -> str:
        """What the shards this node is to run look like now (control/watch.py)."""
        return self.watch.digest(node_id, self.generation, self.replicas.values())

    def used(self, replica_id: str, at: float) -> None:
        self.last_used[replica_id] = max(at, self.last_used.get(replica_id, 0.0))

    def used_here(self, replica_id: str, at: float, outstanding: int) -> None:
        """This process's own router, twice per request (sent, ended): used() and in_flight() for one replica,
        without their per-call dictionaries (its reports are never silent: it is this process)."""
        self.used(replica_id, at)
        mine = self.in_flight_by.get(LOCAL)
        if mine is None:
            mine = self.in_flight_by[LOCAL] = {}
        if outstanding > 0:
            mine[replica_id] = outstanding
        else:
            mine.pop(replica_id, None)

    def in_flight(self, reporter: str, counts: dict[str, int], whole: bool, heard: float | None = None) -> None:
        """What one router process has in flight: its whole table (`whole`), or just these replicas' counts."""
        if whole:
            self.in_flight_by[reporter] = {r: n for r, n in counts.items() if n > 0}
        else:
            mine = self.in_flight_by.setdefault(reporter, {})
            for r, n in counts.items():
                if n > 0:
                    mine[r] = n
                else:
                    mine.pop(r, None)
        self._heard_at[reporter] = self.clock.monotonic() if heard is None else heard

    def outstanding(self, own: bool = False) -> dict[str, int]:
        """Requests in flight per replica, over every reporter heard from lately (a worker that died says no more);
        `own`: this server's routers only, not those of other servers sharing the store."""
        now = self.clock.monotonic()
        total: dict[str, int] = {}
        for reporter, counts in self.in_flight_by.items():
            if reporter != LOCAL and now - self._heard_at.get(reporter, now) > REPORTER_SILENT_AFTER:
                continue
            if own and reporter.startswith(SERVER):
                continue
            for r, n in counts.items():
                total[r] = total.get(r, 0) + n
        return total

    def record_activity(self, act: Activity) -> None:
        """A router process's report: demand for catalogued models, use of replicas, its requests in flight."""
        for model, at in act.demand.items():
            if model in self.models:
                self.demand[model] = max(at, self.demand.get(model, 0.0))
        for rid, at in act.used.items():
            self.used(rid, at)
        for ticket, used in act.settled:
            self.quotas.settle(ticket, used)
        if act.reporter:
            self.in_flight(act.reporter, act.outstanding, whole=True)
            if act.stats is not None and act.reporter != LOCAL:
                self._keep_stats(act.reporter, act.stats)

    async def record_usage(self, batch: Sequence[AnyUsage]) -> int:
        """Usage, in the store before this returns (one transaction); raises StoreError when it is not. What was
        new is added to the in-memory totals the summary reads."""
        fresh = await self.writer.run(self.store.add_usage_new, batch)
        self.usage.add(fresh)
        return len(fresh)

    def key_names(self) -> dict[str, str] | None:
        """Key id -> name as last read; None when keys changed since (refresh_key_names reads them again)."""
        version, _, names = self._keys
        return names if version == self.keys_version else None

    def refresh_key_names(self) -> dict[str, str]:
        """A store read: call it off the event loop (plane.read)."""
        version = self.keys_version
        keys = {k.id: k for k in self.store.list_keys()}
        names = {k: r.name for k, r in keys.items()}
        self._keys = (version, keys, names)
        return names

    async def key_record(self, key_id: str) -> ApiKeyRecord | None:
        """The key with this id as the store has it now (read again, off the loop, when keys changed)."""
        if self._keys[0] != self.keys_version:
            await self.read(self.refresh_key_names)
        return self._keys[1].get(key_id)

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        """A store read off the event loop. Not through the writer: a read must not wait behind a failing write.
        Whether reads fail is kept, beside the writer's account of writes (store_failing_for)."""
        try:
            got = await asyncio.to_thread(fn, *args)
        except StoreError:
            if self._reads_failing_since is None:
                self._reads_failing_since = self.clock.monotonic()
            raise
        self._reads_failing_since = None
        return got

    async def create_key(self, name: str, models: list[str],
                         limits: quota.KeyLimits | None = None) -> tuple[str, ApiKeyRecord]:
        raw, rec = new_key(name, models, self.clock)
        rec.limits = limits
        await self.writer.run(self.store.put_key, rec)
        self._key_written(rec)
        return raw, rec

    async def update_key(self, key_id: str, update: dict[str, Any]) -> ApiKeyRecord | str:
        """A key's new limits or models, from now on (routers reload keys when keys_version moves); or why not.
        Read and written under the keys' lock, so a revocation landing meanwhile is never written over."""
        async with self._keys_lock:
            key = next((k for k in await self.read(self.store.list_keys) if k.id == key_id), None)
            if key is None:
                return f"no key with id {key_id}"
            if key.revoked_at is not None:
                return f"key {key_id} is revoked"
            new = key.model_copy(update=update)
            await self.writer.run(self.store.put_key, new)
            self._key_written(new)
        if "limits" in update:  # a budget added or moved to another period counts what was spent before the change
            for period, start, spent in await self.read(self._spent_by_period, self.clock.now(), None):
                self.quotas.seed(period, start, [t for t in spent if t.key_id == key_id])
        return new

    def _spent_by_period(self, now: float, totals: list[UsageTotal] | None) -> list[
            tuple[quota.Period, float, list[UsageTotal]]]:
        """What keys spent, as the store's aggregates say: this day and this month (hourly), and in all."""
        out: list[tuple[quota.Period, float, list[UsageTotal]]] = []
        for period in ("day", "month"):
            start = quota.period_start(period, now)
            out.append((period, start, self.store.usage_recent(start)))
        out.append(("total", 0.0, self.store.usage_totals() if totals is None else totals))
        return out

    def _key_written(self, rec: ApiKeyRecord) -> None:
        """Keys changed (routers read them again); what this process knows of them follows without a store read,
        so a page view or a scrape never waits on the store for a name (a store outage would hold it)."""
        version, keys, names = self._keys
        fresh = version == self.keys_version
        self.keys_version += 1
        if fresh:
            self._keys = (self.keys_version, {**keys, rec.id: rec}, {**names, rec.id: rec.name})

    def known_key_names(self) -> dict[str, str]:
        """The key names last known, however old: for a view that must not wait on the store."""
        return self._keys[2]

    async def revoke_keys(self, match: Callable[[ApiKeyRecord], bool]) -> list[str]:
        """Revoke every live key that matches; their ids."""
        async with self._keys_lock:
            return await self._revoke_keys(match)

    async def _revoke_keys(self, match: Callable[[ApiKeyRecord], bool]) -> list[str]:
        now = self.clock.now()
        done = []
        for k in await self.read(self.store.list_keys):
            if k.revoked_at is None and match(k):
                await self.writer.run(self.store.put_key, k.model_copy(update={"revoked_at": now}))
                done.append(k.id)
        if done:
            self.keys_version += 1
        return done

    def ready_table(self) -> dict[str, list[ReadyReplica]]:
        ready: dict[str, list[ReadyReplica]] = {}
        for r in self.replicas.values():
            if r.ready and r.endpoint:
                held = leader_shard(r, self.nodes)  # what it says of its engine: connections, slots
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
            on_demand=spec.on_demand if spec else False,
            replicas=[ReplicaExplanation(id=r.id, phase=replica_phase(r), nodes=r.node_ids(), conditions=r.conditions,
                                         stop=r.stop, placement=r.explanation) for r in reps],
        )

