"""What the routers saw, as the control plane keeps it: demand for models, when replicas were last used, requests in
flight per replica and per reporting process, the leading shards' engine gauges, and the routers' request stats."""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Sequence

from llmgw.api.router import ActivityReport as Report
from llmgw.api.stats import RouterStats
from llmgw.control.activity.recent_requests import RecentRequests
from llmgw.control.activity.sharing import SERVER, Others
from llmgw.control.storage.storage import Storage
from llmgw.control.tenants.limit_counters import LimitCounters
from llmgw.control.tenants.usage_totals import UsageTotals
from llmgw.core.clock import Clock
from llmgw.store.base import AnyUsage
from llmgw.wire.messages import EngineLoad, ShardState
from llmgw.wire.renewal import ShardLoad

LOCAL = "local"  # the router in the control plane's own process
REPORTER_SILENT_AFTER = 30.0  # a worker whose last report is older is gone: its in-flight counts no longer count
MAX_REPORTERS = 1024  # router processes whose measurements are kept one by one (a few per server in practice)


class Activity:
    def __init__(self, clock: Clock, catalogued: Callable[[str], bool], kick: Callable[[], None],
                 limit_counters: LimitCounters, usage: UsageTotals, storage: Storage) -> None:
        self.clock = clock
        self._catalogued = catalogued  # whether the catalog (the registry's) has a model: only those count as demand
        self._kick = kick  # asks the passes for one now (nodes/kick.py)
        self._limit_counters = limit_counters
        self._usage = usage
        self._storage = storage
        self.demand: dict[str, float] = {}
        self.last_used: dict[str, float] = {}
        self.recent = RecentRequests()  # requests per replica lately: what preempting it would cost
        # requests in flight per replica, per reporter (this process's router, each API worker): summed, never
        # overwritten, so a replica busy in one worker does not look idle because another worker has none on it
        self.in_flight_by: dict[str, dict[str, int]] = {}
        self._heard_at: dict[str, float] = {}
        self.engine_loads: dict[str, EngineLoad] = {}  # replica id -> its leading shard's gauges, last reported
        # what router processes measured: this process's router read live, the others' last cumulative reports,
        # and what silent reporters had counted (their counters stay; their requests in flight do not)
        self._local_stats: Callable[[], RouterStats] | None = None
        self._reported_stats: dict[str, RouterStats] = {}
        self._retired_stats = RouterStats()

    def want(self, model: str) -> None:
        if model not in self.demand:
            self._kick()  # a load asked for now is placed now, not at the next pass
        self.demand[model] = self.clock.now()

    def met(self, model: str) -> None:
        """The request that asked for a load has its replica: a later eviction must not re-load it."""
        self.demand.pop(model, None)

    def forget(self, replica_id: str) -> None:
        """A replica reaped: its use, gauges and requests in flight go with it."""
        self.last_used.pop(replica_id, None)
        self.recent.forget(replica_id)
        self.engine_loads.pop(replica_id, None)
        for counts in self.in_flight_by.values():
            counts.pop(replica_id, None)

    def loads_reported(self, shards: Iterable[ShardState | ShardLoad], replicas: Container[str]) -> None:
        """What routers weigh replicas by: the leading shard's engine gauges, as its node reported them (in a full
        report or a renewal)."""
        for sh in shards:
            if sh.rank == 0 and sh.replica_id in replicas:
                if sh.load is not None:
                    self.engine_loads[sh.replica_id] = sh.load
                else:
                    self.engine_loads.pop(sh.replica_id, None)

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

    def record_activity(self, act: Report) -> None:
        """A router process's report: demand for catalogued models, use of replicas, its requests in flight."""
        for model, at in act.demand.items():
            if self._catalogued(model):
                self.demand[model] = max(at, self.demand.get(model, 0.0))
        for rid, at in act.used.items():
            self.used(rid, at)
        for ticket, used in act.settled:
            self._limit_counters.settle(ticket, used)
        if act.reporter:
            self.in_flight(act.reporter, act.outstanding, whole=True)
            if act.stats is not None and act.reporter != LOCAL:
                self._keep_stats(act.reporter, act.stats)

    def heard_from_others(self, seen: Others, now: float) -> None:
        """What the other servers' routers saw (control/activity/sharing.py), taken in by the leader."""
        for model, at in seen.demand.items():
            if self._catalogued(model) and at > self.demand.get(model, 0.0):
                self.demand[model] = at
        for rid, at in seen.used.items():
            self.used(rid, at)
        mono = self.clock.monotonic()
        for reporter, counts in seen.in_flight.items():  # heard when the row was written, not when it was read
            self.in_flight(reporter, counts, whole=True, heard=mono - max(0.0, now - seen.heard.get(reporter, now)))

    async def record_usage(self, batch: Sequence[AnyUsage]) -> int:
        """Usage, in the store before this returns (one transaction); raises StoreError when it is not. What was
        new is added to the in-memory totals the summary reads."""
        fresh = await self._storage.writer.run(self._storage.store.add_usage_new, batch)
        self._usage.add(fresh)
        self._limit_counters.gpu.measured(fresh)  # models' speeds, for GPU budgets' reservations
        self.recent.add(fresh)
        return len(fresh)
