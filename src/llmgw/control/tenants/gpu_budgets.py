"""The figures of every key's budgets in GPU-seconds or money (core/gpu_budget.py decides), kept beside its token
counters (control/tenants/limit_counters.py owns this): what its requests in flight hold, what chargeback's
charges say it spent (store.charges_since, read again each time store.charge_mark moves), what its requests settled
since the mark are taken to have cost until their charges land, and each model's measured speed and size."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Protocol, TypeVar

from llmgw.config.chargeback import NO_GPU, ChargebackConfig
from llmgw.config.server import ModelSpec
from llmgw.control.storage.storage import Storage
from llmgw.core.clock import Clock
from llmgw.core.gpu_budget import GpuUse, Size, bound, of_seconds, speed
from llmgw.core.limits import PERIODS, Period, period_start
from llmgw.records.chargeback import ChargeRow
from llmgw.records.state import NodeRecord, ReplicaRecord
from llmgw.store.base import AnyUsage

BUCKET_S = 10.0  # settled figures are summed per key in buckets of this many seconds of their end
MAX_BUCKETS = 10_000  # per key (chargeback stalled): beyond, the oldest is merged into the next, sums kept
SPEEDS_KEPT = 64  # per model: the last requests' speeds the estimate is taken from
MAX_MODELS = 10_000
HOUR_S = 3600.0
NOTHING = GpuUse()
SHARED_UNITS = {"kgpu": 1e3, "kcst": 1e6}  # written to the other servers as whole milli-GPU-s and millionths


Shared = TypeVar("Shared", bound=tuple[float, ...])


def keep_fresh(elsewhere: dict[str, dict[str, Shared]], now: float, fresh: float) -> None:
    """Per key, the other servers' figures (`at` first) no older than `fresh`; a key left with none is dropped."""
    for key_id, servers in list(elsewhere.items()):
        live = {s: v for s, v in servers.items() if now - v[0] <= fresh}
        if live:
            elsewhere[key_id] = live
        else:
            del elsewhere[key_id]


class Settled:
    """One key's requests settled since the mark, summed per BUCKET_S of their end (oldest first), and in all."""

    def __init__(self) -> None:
        self.buckets: dict[int, list[float]] = {}
        self.gpu_s = self.cost = 0.0

    def add(self, b: int, use: GpuUse) -> None:
        had = self.buckets.get(b)
        if had is None:
            out_of_order = bool(self.buckets) and b < next(reversed(self.buckets))  # the wall clock stepped back
            had = self.buckets[b] = [0.0, 0.0]
            if out_of_order:
                self.buckets = dict(sorted(self.buckets.items()))
        had[0] += use.gpu_s
        had[1] += use.cost
        self.gpu_s += use.gpu_s
        self.cost += use.cost
        if len(self.buckets) > MAX_BUCKETS:  # kept, merged into the next one
            oldest = next(iter(self.buckets))
            gpu_s, cost = self.buckets.pop(oldest)
            nxt = self.buckets[next(iter(self.buckets))]
            nxt[0] += gpu_s
            nxt[1] += cost

    def since(self, b: int) -> GpuUse:
        """What was settled in buckets from `b` on."""
        if not self.buckets or next(iter(self.buckets)) >= b:
            return GpuUse(self.gpu_s, self.cost)
        kept = [v for k, v in self.buckets.items() if k >= b]
        return GpuUse(sum(v[0] for v in kept), sum(v[1] for v in kept))

    def drop_before(self, b: int) -> bool:
        """Buckets wholly before bucket `b` dropped; whether any is left."""
        for k in [k for k in self.buckets if k < b]:
            gpu_s, cost = self.buckets.pop(k)
            self.gpu_s, self.cost = max(0.0, self.gpu_s - gpu_s), max(0.0, self.cost - cost)
        return bool(self.buckets)


class GpuBudgets:
    def __init__(self, clock: Clock, currency: str, size_of: Callable[[str], Size] | None = None) -> None:
        self.clock = clock
        self.currency = currency
        self.size_of: Callable[[str], Size] = size_of or (lambda model: Size(1, 0.0))
        self._speeds: dict[str, deque[float]] = {}  # model -> recent requests' tokens per second
        self._speed: dict[str, float] = {}  # model -> the speed taken from them (sorted once per batch recorded)
        self.held: dict[str, GpuUse] = {}  # key -> what its requests in flight reserved
        self.mark = 0.0  # chargeback's mark as last read: GPU time before it is charged
        self.read = False  # the store's charges read at least once
        self.fresh = 30.0  # how old another server's figures may be and still count (forget_silent says)
        self._final_h = 0  # hours before this one are whole (the mark is past them): folded into _frozen
        self._frozen: dict[str, dict[Period, tuple[float, GpuUse]]] = {}  # key -> period -> (its start, charged)
        self._recent: dict[str, list[tuple[float, GpuUse]]] = {}  # key -> (hour's start, charged) of hours not whole
        self._local: dict[str, Settled] = {}  # key -> what its requests settled since the mark
        # key -> server -> (when it said so, GPU-s, money) its requests hold or settled since the mark, as it said
        self._elsewhere: dict[str, dict[str, tuple[float, float, float]]] = {}

    def sized_by(self, size_of: Callable[[str], Size]) -> None:
        """Where each model's size is read from (the registry's, once it is made: control/plane.py)."""
        self.size_of = size_of

    def measured(self, records: Iterable[AnyUsage]) -> None:
        """Recorded requests that ended well: their speed, for the next reservations of their model. Their speed
        is what they generated over their time (decode only): prompt tokens are read many times faster than any
        are generated, so counting them let one key's prompt-heavy requests raise the speed every key's reservations
        are sized by (after 70 of them a key with a 100 GPU-second budget had 40 of 40 requests admitted, 161
        GPU-seconds settled, against 2 of 40), and no request generates faster than its engine can."""
        changed = set()
        for r in records:
            tokens = r.completion_tokens
            if r.status != 200 or r.duration_s <= 0 or tokens <= 0:
                continue
            kept = self._speeds.get(r.model)
            if kept is None:
                if len(self._speeds) >= MAX_MODELS:
                    continue
                kept = self._speeds[r.model] = deque(maxlen=SPEEDS_KEPT)
            kept.append(tokens / r.duration_s)
            changed.add(r.model)
        for model in changed:
            self._speed[model] = speed(self._speeds[model])

    def ask(self, model: str, tokens: int) -> GpuUse:
        """What a request of `model` reserving `tokens` tokens reserves of GPU budgets."""
        taken = self._speed.get(model)
        return bound(tokens, self.size_of(model), speed(()) if taken is None else taken)

    def hold(self, key_id: str, use: GpuUse, sign: int = 1) -> None:
        h = self.held.get(key_id, NOTHING)
        left = GpuUse(max(0.0, h.gpu_s + sign * use.gpu_s), max(0.0, h.cost + sign * use.cost))
        if left == NOTHING:
            self.held.pop(key_id, None)
        else:
            self.held[key_id] = left

    def settled(self, key_id: str, model: str, seconds: float, end: float) -> GpuUse:
        """A request of `model` that held its admission `seconds` and ended at `end` (wall clock): what it is taken
        to have cost until the charges for its time land (none if they have)."""
        use = of_seconds(self.size_of(model), seconds)
        if end < self.mark:
            return NOTHING
        local = self._local.get(key_id)
        if local is None:
            local = self._local[key_id] = Settled()
        local.add(int(end // BUCKET_S), use)
        return use

    def replayed(self, records: Iterable[AnyUsage]) -> None:
        """At start: requests recorded as having reached a replica and ended after the mark, settled at their
        duration, as this server counted them before it stopped (their charges have not landed)."""
        for r in records:
            if r.replica_id and r.duration_s > 0 and r.started_at + r.duration_s >= self.mark:
                self.settled(r.key_id, r.model, r.duration_s, r.started_at + r.duration_s)

    def spent(self, key_id: str, period: Period, now: float) -> GpuUse:
        """What `key_id` spent in the period of that kind holding `now`: the charges landed, and its requests
        settled since the mark."""
        start = period_start(period, now)
        total = NOTHING
        frozen = self._frozen.get(key_id, {}).get(period)
        if frozen is not None and frozen[0] == start:
            total = frozen[1]
        for at, use in self._recent.get(key_id, ()):
            if at >= start:
                total = total + use
        local = self._local.get(key_id)
        return total if local is None else total + local.since(int(start // BUCKET_S))

    def unlanded(self, key_id: str, now: float) -> GpuUse:
        """What `key_id`'s requests hold, here and at the other servers, and settled since the mark elsewhere."""
        out = self.held.get(key_id, NOTHING)
        for at, gpu_s, cost in self._elsewhere.get(key_id, {}).values():
            if now - at <= self.fresh:
                out = out + GpuUse(gpu_s, cost)
        return out

    def shared(self) -> dict[tuple[str, str], int]:
        """This server's figures per key for the others: (kind, key id) -> n (sharing.KEY_KINDS kgpu, kcst)."""
        out: dict[tuple[str, str], int] = {}
        for key_id in self.held.keys() | self._local.keys():
            local = self._local.get(key_id)
            use = self.held.get(key_id, NOTHING) + (local.since(0) if local is not None else NOTHING)
            out[("kgpu", key_id)] = round(use.gpu_s * SHARED_UNITS["kgpu"])
            out[("kcst", key_id)] = round(use.cost * SHARED_UNITS["kcst"])
        return out

    def heard(self, server: str, kind: str, key_id: str, at: float, n: int) -> None:
        """Another server's figure for a key (shared())."""
        servers = self._elsewhere.setdefault(key_id, {})
        had_at, gpu_s, cost = servers.get(server, (at, 0.0, 0.0))
        value = n / SHARED_UNITS[kind]
        servers[server] = (max(at, had_at), value if kind == "kgpu" else gpu_s, value if kind == "kcst" else cost)

    def forget_silent(self, now: float, fresh: float) -> None:
        """Servers whose figures are older than `fresh` have stopped: theirs no longer count."""
        self.fresh = fresh
        keep_fresh(self._elsewhere, now, fresh)

    def landed(self, mark: float, rows: Iterable[ChargeRow]) -> None:
        """Chargeback's mark and its charges from the hour `reads_from()` says on: whole hours are folded, the
        others kept as read; settled figures for time before the mark are dropped (their charges are in)."""
        final_h = max(self._final_h, int(mark // HOUR_S))
        self._recent = {}
        for r in rows:
            use = GpuUse(r.gpu_s, r.cost)
            if r.hour < final_h:
                self._fold(r.key_id, r.hour * HOUR_S, use)
            else:
                self._recent.setdefault(r.key_id, []).append((r.hour * HOUR_S, use))
        self._final_h, self.mark, self.read = final_h, max(self.mark, mark), True
        for key_id, local in list(self._local.items()):
            if not local.drop_before(int(self.mark // BUCKET_S)):
                del self._local[key_id]

    async def refresh(self, storage: Storage) -> None:
        """Chargeback's charges read again when its mark moved (each pass: one row read when it has not)."""
        mark = await storage.read(storage.store.charge_mark)
        if mark != self.mark or not self.read:
            self.landed(mark, await storage.read(storage.store.charges_since, self.reads_from()))

    def reads_from(self) -> float:
        """Where the next read of the charges starts (store.charges_since)."""
        return self._final_h * HOUR_S

    def _fold(self, key_id: str, at: float, use: GpuUse) -> None:
        kept = self._frozen.setdefault(key_id, {})
        for period in PERIODS:
            start = period_start(period, at)
            had = kept.get(period)
            if had is None or had[0] < start:
                kept[period] = (start, use)
            elif had[0] == start:
                kept[period] = (start, had[1] + use)


def replica_gpus(r: ReplicaRecord, nodes: dict[str, NodeRecord]) -> list[tuple[str, str]]:
    """Each GPU the replica holds over all its shards: its name and llmgw's short class as its node reports them
    (("", ""): a GPU its node does not report, or a node not known)."""
    out: list[tuple[str, str]] = []
    for a in r.assignments:
        node = nodes.get(a.node_id)
        gpus = {g.index: (g.name, g.gpu_class) for g in node.report.hardware.gpus} if node is not None else {}
        out += [gpus.get(i, ("", "")) for i in a.gpus]
    return out


class Replicas(Protocol):
    """What ModelSizes reads of the registry (control/nodes/registry.py)."""

    generation: int
    replicas: dict[str, ReplicaRecord]
    nodes: dict[str, NodeRecord]
    models: dict[str, ModelSpec]


class ModelSizes:
    """What one replica of each model holds, from the registry (read again when its replicas change)."""

    def __init__(self, registry: Replicas, chargeback: ChargebackConfig) -> None:
        self._registry, self._chargeback = registry, chargeback
        self._cache: tuple[int, dict[str, Size]] = (-1, {})

    def __call__(self, model: str) -> Size:
        gen = self._registry.generation
        if self._cache[0] != gen:
            self._cache = (gen, self._measure())
        size = self._cache[1].get(model)
        return size if size is not None else self._configured(model)

    def _measure(self) -> dict[str, Size]:
        """The largest and dearest replica of each model that has one: the bound holds whichever serves it."""
        out: dict[str, Size] = {}
        cb = self._chargeback
        for r in self._registry.replicas.values():
            held = replica_gpus(r, self._registry.nodes)
            rates = [cb.rate(cb.gpu_class(*n)) for n in set(held) if n != ("", "")]
            if any(not a.gpus for a in r.assignments):  # a shard on a CPU engine: one device of class cpu
                rates.append(cb.rate(NO_GPU))
            gpus, rate = len(held), max(rates, default=0.0)
            had = out.get(r.model, Size(0, 0.0))
            out[r.model] = Size(max(had.gpus, gpus, 1), max(had.rate, rate))
        return out

    def _configured(self, model: str) -> Size:
        """A model with no replica now: the GPUs its profile asks for, at the dearest rate configured."""
        spec = self._registry.models.get(model)
        gpus = spec.profile.gpus_per_shard * spec.profile.nodes if spec is not None else 1
        return Size(max(1, gpus), max(self._chargeback.rates.values(), default=0.0))
