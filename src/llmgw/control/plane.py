"""The control plane's composition root: its owners, built once and wired together, and the few operations that
span several of them (start, revoking a node, health). The owners are declared once, in control/owners.py (what
each holds, the module that alone writes it); this builds exactly those (tests/control/test_owners.py). Each owner
writes only its own state; another owner's changes go through that owner's named operations."""

from __future__ import annotations

from collections.abc import Callable

from llmgw.config.server import ServerConfig
from llmgw.control.activity.activity import Activity
from llmgw.control.chargeback.charge_book import ChargeBook
from llmgw.control.chargeback.chargeback import Chargeback
from llmgw.control.ha.following import Following, health_of
from llmgw.control.ha.liveness import liveness_for
from llmgw.control.hub.hub_models import HubModels, Resolver, hub_resolve
from llmgw.control.nodes.heartbeats import Heartbeats
from llmgw.control.nodes.kick import Kick
from llmgw.control.nodes.passes import Passes
from llmgw.control.nodes.ready_times import ReadyTimes
from llmgw.control.nodes.registry import Registry, revoke_node
from llmgw.control.nodes.release_digests import Reader, ReleaseDigests, read_list
from llmgw.control.nodes.sleep_refusals import SleepRefusals
from llmgw.control.storage.leadership import Leadership, holder_id
from llmgw.control.storage.storage import Storage
from llmgw.control.storage.writer import InlineWriter, StoreWriter
from llmgw.control.tenants.credentials import Credentials, spent_by_period
from llmgw.control.tenants.gpu_budgets import GpuBudgets, ModelSizes
from llmgw.control.tenants.limit_counters import LimitCounters
from llmgw.control.tenants.usage_totals import DAY, UsageTotals
from llmgw.control.views.metrics import Gauges
from llmgw.control.views.status import StatusSources
from llmgw.core.clock import Clock
from llmgw.reconcile.world import Timings
from llmgw.store.base import HOUR, Store


def timings_of(cfg: ServerConfig) -> Timings:
    return Timings(
        node_lost_after=cfg.node_lost_after,
        evict_idle_after=cfg.eviction.idle_after,
        evict_protect=cfg.eviction.protect_after_ready,
        demand_window=max(60.0, 4 * cfg.load_wait),
        loss_grace=min(cfg.node_lost_after / 2, max(1.0, 2 * cfg.heartbeat_interval)),
        keep_failed=cfg.failed_kept_for,
        sleep_host_share=cfg.eviction.sleep_host_share,
        drain_timeout=cfg.drain_timeout,
    )


class ControlPlane:
    def __init__(
        self,
        cfg: ServerConfig,
        store: Store,
        clock: Clock,
        timings: Timings | None = None,
        writer: InlineWriter | StoreWriter | None = None,
        resolver: Resolver | None = None,
        digests_reader: Reader | None = None,
    ) -> None:
        self.cfg = cfg
        self.store = store
        self.clock = clock
        self.writer = writer or InlineWriter()  # the server passes a StoreWriter: no write on the event loop
        self.timings = timings or timings_of(cfg)
        self.storage = Storage(store, self.writer, clock, shared=cfg.store.kind == "postgres")
        self.leadership = Leadership(holder_id(), cfg.leader_lease)
        self.limit_counters = LimitCounters(clock, cfg.router.default_limits,  # every key's counters against its limits
                                            GpuBudgets(clock, cfg.chargeback.currency))
        self.usage = UsageTotals()  # totals per key and model, all-time and by the hour: the summary's usage
        kick = Kick()  # a pass is worth running before the next interval: several owners ask, the passes take it
        # the catalog is the registry's, which is handed the activity: the activity asks it when a report comes
        self.activity = Activity(clock, lambda model: self.registry.catalogued(model), kick.kick, self.limit_counters,
                                 self.usage, self.storage)
        self.credentials = Credentials(self.storage, self.limit_counters)
        self.registry = Registry(self.storage, self.leadership, self.activity, kick.kick)
        self.limit_counters.gpu.sized_by(ModelSizes(self.registry, cfg.chargeback))
        self.hub_models = HubModels(cfg.hub, clock, resolver or hub_resolve, store)
        self.sleep_refusals = SleepRefusals()  # nodes where an engine refused sleep mode: it runs there without
        # each engine release's digest list, read here for the whole fleet: the nodes read none
        self.release_digests = ReleaseDigests(clock, digests_reader or read_list)
        self.heartbeats = Heartbeats(cfg, self.storage, self.registry, self.activity, self.credentials, kick.kick,
                                     self.hub_models, self.sleep_refusals, self.release_digests)
        self.charge_book = ChargeBook(cfg.chargeback.currency)  # GPU time per key, as the dashboard shows it
        self.ready_times = ReadyTimes()  # each way to ready (wake, load) measured per model, engine, GPU class
        self.passes = Passes(cfg, self.storage, self.timings, self.leadership, self.registry, self.activity, kick,
                             self.hub_models, self.ready_times, self.sleep_refusals)
        self.chargeback = Chargeback(cfg.chargeback, self.storage, self.leadership, self.registry, clock)
        self.following = Following(self.storage, self.leadership, self.registry, self.credentials, self.activity,
                                   self.limit_counters,
                                   liveness_for(cfg.reconcile_interval, cfg.heartbeat_interval, cfg.node_lost_after))
        self.gauges: Gauges = {
            "llmgw_store_writes_queued": ("Store writes waiting for the writer (grows while the store fails)",
                                          lambda: float(self.writer.pending())),
            "llmgw_store_unreachable_seconds": ("How long the store has failed writes or reads (0: they work); "
                                                "serving goes on meanwhile", self.storage.failing_for),
        }

    def load(self) -> None:
        """Adopt what the store holds. Timers for silent nodes restart now, not from stale timestamps."""
        store, now = self.store, self.clock.now()
        store.put_models(self.cfg.models)
        self.credentials.adopt_revocations(store.list_revocations())
        revs = store.revs()  # before the records: a change between the two is read again, never missed
        self.registry.start(now, self.cfg.models, store.list_nodes())
        totals = store.usage_totals()
        self.usage.load(totals, store.usage_by_hour(now - DAY - HOUR))
        for period, start, spent in spent_by_period(store, now, totals):  # what keys spent before, for budgets
            self.limit_counters.seed(period, start, spent)
        # and GPU time charged (what retention pruned too: `total` budgets count it)
        self.limit_counters.gpu.landed(store.charge_mark(), store.pruned_charges() + store.charges_since(0.0))
        self.following.start(now, revs)
        self.registry.adopt_replicas(store.list_replicas())
        self.registry.changed()
        if not self.storage.shared:  # alone on its store, every record is its own (else the others count theirs)
            since = max(self.limit_counters.gpu.mark, now - DAY) - self.cfg.chargeback.settle_after  # not charged yet
            self.limit_counters.gpu.replayed(store.usage_started(since, now + DAY))
        reg = self.registry
        self.storage.event("control", "plane", f"started with {len(reg.nodes)} node(s), {len(reg.replicas)} "
                           f"replica(s), {len(reg.models)} model(s)")

    def add_gauge(self, name: str, words: str, read: Callable[[], float]) -> None:
        """One more of the control plane's own gauges (the server adds its router's)."""
        self.gauges[name] = (words, read)

    def status(self) -> StatusSources:
        """The owners the summary (management API, dashboard, metrics) is read from."""
        return StatusSources(self.registry, self.activity, self.credentials, self.storage, self.usage, self.passes,
                      hub=lambda: self.hub_models.states, ready_times=self.ready_times.lines,
                      charges=self.charge_book)

    async def revoke(self, node_id: str, serial: str, reason: str) -> str:
        """Cut a node off (serial "") or one of its certificates. Takes effect at its next heartbeat; revoking the
        whole node also fails its replicas now, so they are rebuilt elsewhere. Written before anything changes: the
        operator is told it is done only once it outlives a restart (the store's failure is raised)."""
        return await revoke_node(self.credentials, self.registry, self.storage, node_id, serial, reason)

    def health(self) -> dict[str, object]:
        return health_of(self.cfg, self.storage, self.leadership)

