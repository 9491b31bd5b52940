"""This server among others on one store: the lease that says who reconciles (control/storage/leadership.py), what the
others wrote followed (nodes they heard, the leader's replicas, keys, revocations), what this server's routers saw
shared with them (control/activity/sharing.py), and what keys spent read again for their budgets."""

from __future__ import annotations

from llmgw.config.server import ServerConfig
from llmgw.control.activity.activity import REPORTER_SILENT_AFTER, Activity
from llmgw.control.activity.sharing import Sharing
from llmgw.control.ha.liveness import Liveness, NewestRow
from llmgw.control.nodes.registry import Registry
from llmgw.control.storage.leadership import Leadership, Turn
from llmgw.control.storage.storage import Storage
from llmgw.control.tenants.credentials import Credentials, spent_by_period
from llmgw.control.tenants.limit_counters import LimitCounters
from llmgw.control.tenants.usage_totals import DAY
from llmgw.core.errors import StoreError
from llmgw.store.base import Lease, Renewals

BUDGETS_REREAD_S = 10.0  # on a shared store, what keys spent is read again this often (others' usage, as recorded)
ACTIVITY_SLACK_S = 10.0  # others' activity is read from this long before the last read (their clocks, their commits)


class Following:
    def __init__(self, storage: Storage, leadership: Leadership, registry: Registry, credentials: Credentials,
                 activity: Activity, limit_counters: LimitCounters, liveness: Liveness) -> None:
        self.clock = storage.clock
        self._storage = storage
        # whether this server reconciles: the lease in the store (control/storage/leadership.py); every server serves
        self.leadership = leadership
        self._registry = registry
        self._credentials = credentials
        self._activity = activity
        self._limit_counters = limit_counters
        self._revs: dict[str, int] = {}  # the store's revisions as last followed
        self._sharing = Sharing()  # what this server's routers saw, written for the leader (activity/sharing.py)
        self._activity_read_at: float | None = None  # when the others' activity was last read (None: read a day's)
        self._budgets_read_at = 0.0  # monotonic time keys' spending was last read from the store (shared stores)
        self._liveness = liveness  # when nodes were heard, shared with the others (control/ha/liveness.py)
        self._renewals = NewestRow(lambda at, row: storage.store.put_renewals(leadership.holder, at, row))
        # the newest hearing written as a node record for a leader of an older release (None: the leader is new)
        self._for_older: float | None = None

    @property
    def leading(self) -> bool:
        return self.leadership.leading

    def start(self, now: float, revs: dict[str, int]) -> None:
        """At start: the lease, and the store's revisions as read before its records. A SQLite store is one
        server's (its file is locked: store/opening.py), so its lease is taken at once, even one a crashed
        previous life left unexpired; on PostgreSQL another server may hold it."""
        lead = self.leadership
        self._lease_seen(self._storage.store.lead(lead.holder, None, now, lead.ttl, force=not self._storage.shared))
        self._revs = revs

    async def hold_lease(self) -> None:
        """Extend the lease, or take it once it has expired (the server calls this every third of a lease). Taking
        it over, this server adopts the replicas the last leader wrote, and node silence counts from now: no node
        is declared lost because the leader changed."""
        store, read, lead = self._storage.store, self._storage.read, self.leadership
        try:
            lease = await read(store.lead, lead.holder, lead.epoch, self.clock.now(), lead.ttl)
        except StoreError as e:
            if lead.unreachable(self.clock.now()) == Turn.Lost:
                self._storage.event("control", "plane", f"this server stops reconciling: its lease ran out while "
                                    f"the store was unreachable ({e})")
            return
        if lease.holder == lead.holder and not self.leading:
            # taking over: what the last leader left is read first, and this server leads only once it has it (a
            # pass in between would be a leader's pass over a follower's view, counting silence from before)
            replicas, nodes = await read(store.list_replicas), await read(store.list_nodes)
            if self._lease_seen(lease) != Turn.Gained:
                return
            self._activity_read_at = None  # the others' demand and use since long before, as a leader needs them
            self._registry.take_over(nodes, replicas)
        elif self._lease_seen(lease) == Turn.Lost:
            # deposed: what it believed (writes the store may have refused) gives way to what the store holds
            self._registry.replicas_from_store(await read(store.list_replicas))

    async def follow_store(self) -> None:
        """What the other servers sharing the store wrote (the server calls this before each pass): the reports of
        nodes that talk to them and when they last heard each, the leader's replicas (a follower's), and keys; and
        when this server heard the nodes that talk to it, for them. Nothing when alone on the store."""
        if not self._storage.shared:
            return
        store, read = self._storage.store, self._storage.read
        revs = await read(store.revs)
        seen = self._revs
        if revs.get("nodes", 0) > seen.get("nodes", 0):
            for n in await read(store.nodes_since, seen.get("nodes", 0)):
                self._registry.heard_elsewhere(n)
        if not self.leading and revs.get("replicas", 0) != seen.get("replicas", 0):
            self._registry.replicas_from_store(await read(store.list_replicas))
        if revs.get("keys", 0) != seen.get("keys", 0):  # made, changed or revoked: through another server, unless
            self._credentials.keys_moved(seen.get("keys", 0), revs["keys"])  # every write was this server's own
        if revs.get("revocations", 0) != seen.get("revocations", 0):  # a node cut off through another server
            self._credentials.adopt_revocations(await read(store.list_revocations))
            self._registry.watch.changed()  # a watch it holds is let go: its next heartbeat is refused
        self._revs = revs
        await self._share_liveness()
        mono = self.clock.monotonic()
        if mono - self._budgets_read_at >= BUDGETS_REREAD_S:  # what every server's requests spent, as recorded
            self._budgets_read_at = mono
            await self.seed_budgets()

    async def _share_liveness(self) -> None:
        """This server's hearings written (one row, when it heard anyone since its last), the others' taken in: a
        node renewing only through another server is as alive here as there (control/ha/liveness.py)."""
        store, now, live, me = self._storage.store, self.clock.now(), self._liveness, self.leadership.holder
        row = live.row(self._registry.heard_here, now)
        if self._renewals.offer(now, row):
            try:
                self._storage.writer.submit(self._renewals.write)
            except BaseException:  # written in this thread (InlineWriter) and failed: the next pass writes again
                self._renewals.failed()
                raise
        rows = await self._storage.read(store.renewals, live.since(now))
        for node, at in live.taken(rows, me, now):
            self._registry.renewed_elsewhere(node, at)
        self._records_for_older_leader(rows, now)

    def _records_for_older_leader(self, rows: list[Renewals], now: float) -> None:
        """A leader of a release before renewals (upgrading servers one at a time) reads no renewals and counts a
        node's silence from its record: for it, this server writes the records of the nodes it heard, each pass."""
        lease, me = self.leadership.lease, self.leadership.holder
        leader = lease.holder if lease is not None and lease.expires_at >= now else ""
        if not self._liveness.older_leader(rows, leader, me, now):
            if self._for_older is not None:
                now_leads = "no one" if not leader else "this server" if leader == me else f"{leader} (reads renewals)"
                self._storage.event("control", "plane", f"{now_leads} leads now: this server no longer writes node "
                                    "records for an older leader")
            self._for_older = None
            return
        if self._for_older is None:
            self._storage.event("control", "plane", f"the leader {leader} writes no renewals (an older release): "
                                "this server writes the records of the nodes it hears, each pass, for it")
            self._for_older = 0.0
        self._for_older = self._registry.persist_heard_here(self._for_older)

    async def seed_budgets(self) -> None:
        """What keys spent, read again from the store (kept where more than counted here): on a shared store
        every so often, and once usage a dead process journaled has been recorded."""
        for period, start, spent in await self._storage.read(spent_by_period, self._storage.store, self.clock.now(),
                                                             None):
            self._limit_counters.seed(period, start, spent)

    async def share_activity(self) -> None:
        """On a shared store, write what this server's routers saw (demand, use, requests in flight) and its keys'
        use against their limits; take in the others' keys' use, and, leading, what their routers saw (the server
        calls this before each pass). Rows are read from a little before the last read on (a full day's after
        taking the lead: replicas used long ago count for idle eviction)."""
        if not self._storage.shared:
            return
        now, act, store = self.clock.now(), self._activity, self._storage.store
        rows = self._sharing.rows(act.demand, act.last_used, act.outstanding(own=True), now,
                                  self._limit_counters.shared())
        if rows:
            self._storage.writer.submit(store.put_activity, self.leadership.holder, rows)
        since = now - DAY if self._activity_read_at is None else self._activity_read_at - ACTIVITY_SLACK_S
        seen = self._sharing.others(await self._storage.read(store.activity, since), self.leadership.holder, now,
                                    REPORTER_SILENT_AFTER)
        self._limit_counters.absorb(seen.keys, now, REPORTER_SILENT_AFTER, first=self._activity_read_at is None)
        self._activity_read_at = now
        if self.leading:
            act.heard_from_others(seen, now)

    def release_lease(self) -> None:
        """A server stopping gives its lease up (after its last writes), so another leads at once."""
        if self.leadership.epoch is not None:
            self._storage.store.release(self.leadership.holder, self.leadership.epoch)

    def _lease_seen(self, lease: Lease) -> Turn:
        turn = self.leadership.seen(lease)
        if turn == Turn.Gained:
            self._storage.event("control", "plane", f"this server leads: it reconciles (epoch {lease.epoch})")
        elif turn == Turn.Lost:
            self._storage.event("control", "plane", f"this server no longer leads: {lease.holder} does (epoch "
                                f"{lease.epoch})")
        return turn


def health_of(cfg: ServerConfig, storage: Storage, leadership: Leadership) -> dict[str, object]:
    """What /health says: whether the store answers, who leads. Serving goes on while the store is away, so a
    server whose store is unreachable is degraded, not down."""
    down, stale = storage.failing_for(), storage.stale_for()
    lease = leadership.lease
    leading = leadership.leading
    return {
        "status": "ok" if down == 0 else "degraded",
        "store": {"kind": cfg.store.kind, "reachable": down == 0, "unreachable_seconds": round(down, 1),
                  **({"words": f"the store has failed for {down:.0f}s: serving goes on from what this server "
                               "knows; no placement happens until it is back"} if down else {})},
        # no holder names: /health answers anyone (a load balancer's probe), and names say host and pid
        "routing": {"stale_seconds": round(stale, 1), "serves_stale_for": cfg.router.serve_stale_for,
                    "refusing": stale > cfg.router.serve_stale_for},
        "leader": {"leading": leading, "epoch": lease.epoch if lease else 0,
                   "elsewhere": bool(lease and lease.holder and not leading and lease.expires_at
                                     >= storage.clock.now())},
    }
