"""The leader's reconcile passes: the world as this server knows it, reconcile's intents applied to the registry,
the nodes' records written; and a pass far later than its interval noticed as a stall."""

from __future__ import annotations

import secrets

from llmgw.config.server import ServerConfig
from llmgw.control.activity.activity import Activity
from llmgw.control.hub.hub_models import HubModels
from llmgw.control.nodes.kick import Kick
from llmgw.control.nodes.ready_times import ReadyTimes
from llmgw.control.nodes.registry import Registry
from llmgw.control.nodes.sleep_refusals import SleepRefusals
from llmgw.control.storage.leadership import Leadership
from llmgw.control.storage.storage import Storage
from llmgw.reconcile.intents import Intent
from llmgw.reconcile.reconcile import reconcile
from llmgw.reconcile.world import Timings, World

STALL_AFTER = 5.0  # seconds between passes beyond which the control plane counts itself as having stalled


class Passes:
    def __init__(self, cfg: ServerConfig, storage: Storage, timings: Timings, leadership: Leadership,
                 registry: Registry, activity: Activity, kick: Kick, hub: HubModels,
                 ready_times: ReadyTimes | None = None, refusals: SleepRefusals | None = None) -> None:
        self.cfg = cfg
        self.clock = storage.clock
        self.timings = timings
        self._storage = storage
        self._leadership = leadership
        self._registry = registry
        self._activity = activity
        self._hub = hub
        self._ready_times = ready_times or ReadyTimes()  # each way to ready measured, as the passes see it
        self._refusals = refusals or SleepRefusals()  # nodes where an engine refused sleep mode
        # set when a pass is worth running before the next interval: a request asks for a model not loaded, or a
        # node reports a shard ready or gone (a cold start waits on both)
        self.kick = kick
        self.done = 0  # reconcile passes done: until the first, the summary describes nothing yet
        self._last_pass: float | None = None

    def take_kick(self) -> bool:
        """Whether a pass was asked for since the last time this was asked (the reconcile loop's question)."""
        return self.kick.take()

    def world(self) -> World:
        reg, act = self._registry, self._activity
        return World(
            now=self.clock.now(),
            started_at=reg.started_at,
            models=self._hub.pinned(reg.models),  # placement counts a hub model held only at its commit
            unresolved=self._hub.unresolved(reg.models),
            nodes=list(reg.nodes.values()),
            replicas=list(reg.replicas.values()),
            demand=dict(act.demand),
            last_used=dict(act.last_used),
            outstanding=act.outstanding(),
            recent_requests=act.recent.at(self.clock.now()),
            timings=self.timings,
            entropy=secrets.token_bytes(32),
            resumed_at=reg.resumed_at,
            scale_timers=dict(reg.scale_timers),
            seen=dict(reg.seen),
            ready_times=self._ready_times.seconds(),
            no_sleep=self._refusals.known(),
        )

    def reconcile_once(self) -> list[Intent]:
        """One pass, by the leader only (a follower's would be writes the store refuses)."""
        if not self._leadership.leading:
            self._last_pass = None  # a gap while following is not a stall
            self._registry.persist_nodes()  # the reports this server received: every server writes the nodes it hears
            self.done += 1  # what it shows is what it knows
            return []
        self._notice_stall()
        w = self.world()
        intents = reconcile(w)
        self._registry.apply(intents)
        self._ready_times.saw(w, intents, self._registry.replicas)
        for node, words in self._refusals.learn(w, intents):
            self._storage.event("node", node, words)
        self._registry.persist_nodes()
        self.done += 1
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
            self._registry.resume()
            self._storage.event("control", "plane", f"the control plane stalled for {gap:.0f}s: node silence counts "
                                "from now")
