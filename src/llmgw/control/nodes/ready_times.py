"""How long each way to ready takes, as this control plane saw it: per model, engine, GPU class and way.

A replica's clock starts when a pass places it (a load) or wakes it, and stops at the pass that finds it ready; one
that fails, stops or sleeps first teaches nothing. Each estimate is an exponentially weighted mean (recent loads
count most), kept for at most MAX_KEYS keys (the least recently measured go first). Soft state, like the scale
timers: not persisted; after a restart or a change of leader, sleepers wake as before until measured again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client.core import GaugeMetricFamily

from llmgw.api.views import ReadyTime
from llmgw.reconcile.fastest import Key, load_key, wake_key
from llmgw.reconcile.intents import Intent, Place
from llmgw.reconcile.sleep_intents import Wake
from llmgw.reconcile.world import World
from llmgw.records.state import ReplicaRecord

ALPHA = 0.3  # the weight of the newest measurement
MAX_KEYS = 1024
MAX_SECONDS = 24 * 3600.0  # a replica longer than this on its way (a stalled fetch) teaches nothing


class ReadyTimes:
    def __init__(self) -> None:
        self._estimates: dict[Key, ReadyTime] = {}
        self._started: dict[str, tuple[Key, float]] = {}  # replica id -> its way and when its clock started

    def seconds(self) -> dict[Key, float]:
        """What a pass reads (World.ready_times)."""
        return {k: e.seconds for k, e in self._estimates.items()}

    def lines(self) -> list[ReadyTime]:
        return sorted(self._estimates.values(), key=lambda e: (e.model, e.engine, e.gpu_class, e.way))

    def saw(self, w: World, intents: Iterable[Intent], after: Mapping[str, ReplicaRecord]) -> None:
        """A pass's world and intents, and the replicas as they are once applied: clocks started and stopped."""
        started = [i for i in intents if isinstance(i, Place | Wake)]
        # only a pass that placed or woke a replica indexes the fleet: most passes at 10,000 nodes do neither
        by_id = {n.id: n for n in w.nodes} if started else {}
        before = {r.id: r for r in w.replicas} if started else {}
        for i in started:
            r = after.get(i.replica_id)
            spec = w.models.get(r.model) if r is not None else None
            if r is None or spec is None:
                continue
            if isinstance(i, Place):
                self._started[r.id] = (load_key(spec, by_id, i.assignments), w.now)
            elif (old := before.get(r.id)) is not None and old.sleep_level and r.assignments:
                self._started[r.id] = (wake_key(spec, by_id, r, old.sleep_level), w.now)
        for rid, (key, at) in list(self._started.items()):
            r = after.get(rid)
            if r is not None and r.ready and not r.sleep_level and w.now - at <= MAX_SECONDS:
                self._learn(key, w.now - at, w.now)
            elif r is not None and not (r.failed or r.stop is not None or r.sleep_level or w.now - at > MAX_SECONDS):
                continue  # still on its way
            del self._started[rid]

    def _learn(self, key: Key, took: float, now: float) -> None:
        old = self._estimates.get(key)
        value = took if old is None else (1 - ALPHA) * old.seconds + ALPHA * took
        self._estimates[key] = ReadyTime(model=key[0], engine=key[1], gpu_class=key[2], way=key[3], seconds=value,
                                         samples=(old.samples if old else 0) + 1, at=now)
        if len(self._estimates) > MAX_KEYS:
            oldest = min(self._estimates, key=lambda k: self._estimates[k].at)
            del self._estimates[oldest]


def longest_by_model(lines: Iterable[ReadyTime]) -> dict[str, float]:
    """Each model's longest measured way to ready (any engine, GPU class, load or wake): how long a request waiting
    for it is held (router/waiting.py)."""
    out: dict[str, float] = {}
    for e in lines:
        out[e.model] = max(out.get(e.model, 0.0), e.seconds)
    return out


def ready_family(lines: Iterable[ReadyTime]) -> GaugeMetricFamily:
    g = GaugeMetricFamily("llmgw_ready_seconds", "Measured seconds from placed or woken to ready (a weighted mean), "
                          "per model, engine, GPU class and way", labels=["model", "engine", "gpu_class", "way"])
    for e in lines:
        g.add_metric([e.model, e.engine, e.gpu_class, e.way], e.seconds)
    return g
