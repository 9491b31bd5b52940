"""The leader's chargeback of GPU time (docs/tenants.md, "Chargeback: how GPU time is attributed"): each replica's
span sampled from the registry, each window charged once it has settled (chargeback/ decides), its charges, spans
and the new mark written in one fenced step. A follower, or a leader whose step the store refused, keeps nothing:
it reads the mark and the spans again when it next charges."""

from __future__ import annotations

import asyncio
import logging

from llmgw.chargeback import charge_window
from llmgw.config.chargeback import NO_GPU, ChargebackConfig
from llmgw.config.server import ModelSpec
from llmgw.control.nodes.registry import Registry
from llmgw.control.storage.leadership import Leadership
from llmgw.control.storage.storage import Storage
from llmgw.control.tenants.gpu_budgets import replica_gpus
from llmgw.core.clock import Clock
from llmgw.core.conditions import ConditionType
from llmgw.core.errors import Deposed, StoreError
from llmgw.records.chargeback import ReplicaSpan
from llmgw.records.state import NodeRecord, ReplicaRecord
from llmgw.store.base import IN_FLIGHT, UsageRecord

log = logging.getLogger(__name__)
SAMPLE_EVERY_S = 1.0  # the registry is sampled this often: a sleep shorter than this may go unseen
MAX_WINDOWS_PER_TICK = 64  # a leader far behind catches up in steps, never holding the loop long


class Chargeback:
    """Charges settled windows, on the leader only. Everything it holds in memory is a cache of the store's."""

    def __init__(self, cfg: ChargebackConfig, storage: Storage, leadership: Leadership, registry: Registry,
                 clock: Clock) -> None:
        self.cfg = cfg
        self._storage = storage
        self._leadership = leadership  # read: whether this server leads, and the epoch its writes are fenced by
        self._registry = registry  # read: the replicas whose spans are sampled
        self._clock = clock
        self._spans: dict[str, ReplicaSpan] | None = None  # None: read the store's again before charging
        self._mark = 0.0
        self._carry: list[UsageRecord] | None = None  # records still in flight at the mark (None: read again)
        self._dirty: set[str] = set()  # spans sampled changed since they were last written

    def forget(self) -> None:
        """Drop what is carried: the next tick reads the mark, the spans and the records again."""
        self._spans, self._carry, self._dirty = None, None, set()

    async def tick(self) -> int:
        """Sample the registry and charge every window that has settled: how many were charged."""
        if not self._leadership.leading:
            self.forget()
            return 0
        store, read = self._storage.store, self._storage.read
        if self._spans is None:
            self._mark = await read(store.charge_mark)
            self._spans = {s.id: s for s in await read(store.open_spans, self._mark)}
        self.sample(self._spans)
        done = 0
        try:
            while done < MAX_WINDOWS_PER_TICK and await self._step():
                done += 1
            await self._write_sampled()
        except Deposed as e:  # another leader charged, or this one no longer leads: start again from the store
            log.info("chargeback step refused: %s", e)
            self.forget()
        return done

    def _first_window(self) -> float:
        assert self._spans is not None
        # never charged: every span it knows is uncharged, ended or not
        return self._window_of(min((s.created_at for s in self._spans.values()), default=self._clock.now()))

    def _window_of(self, t: float) -> float:
        return (t // self.cfg.window) * self.cfg.window

    async def _step(self) -> bool:
        """Charge the window after the mark if it has settled."""
        assert self._spans is not None
        a = self._mark if self._mark > 0 else self._first_window()
        b = self._window_of(a) + self.cfg.window  # a mark left by another window length: realigned here
        if b + self.cfg.settle_after > self._clock.now():
            return False
        store, read = self._storage.store, self._storage.read
        if self._carry is None:  # taking over: every record that may overlap the window
            fresh = await read(store.usage_started, a - self.cfg.settle_after, b)
        else:
            fresh = self._carry + await read(store.usage_started, a, b)
        # requests still in flight when a window they ran in settles (or landed only after): their routers mark
        # them, and each such window charges them; without, a request longer than settle_after was charged nothing
        # and its GPU time went to others as idle
        marks = await read(store.open_usage, b)
        waits = [r for r in marks if not r.replica_id]  # requests that waited for a model to load: who asked for it
        opened = [r for r in marks if r.replica_id]
        by_id = {r.id: r for r in fresh}
        by_id.update((r.id, r) for r in opened)
        fresh = list(by_id.values())
        spans = list(self._spans.values())
        acc = charge_window(a, b, spans, fresh, self.cfg, waits)
        self._dirty.clear()  # every span is written with the step
        closed = [r.id for r in marks if _closed(r, b, self.cfg.settle_after)]
        await self._storage.writer.run(store.put_charges, acc.rows, acc.spans, self._mark, b, self._epoch(),
                                       acc.shares, closed)
        self._mark = b
        self._carry = [r for r in fresh if r.started_at + r.duration_s > b]
        self._spans = self._merged(acc.spans, b)
        return True

    async def _write_sampled(self) -> None:
        """Spans sampled new, ready, asleep, woken or ended are written now, not with their window, the mark left
        where it is: a replica gone before its window is charged is in no registry a restarted or new leader
        reads, so its span must already be in the store."""
        assert self._spans is not None
        spans = [self._spans[sid] for sid in sorted(self._dirty) if sid in self._spans]
        self._dirty = set()
        if spans:
            store = self._storage.store
            await self._storage.writer.run(store.put_charges, [], spans, self._mark, self._mark, self._epoch())

    def _epoch(self) -> int:
        epoch = self._leadership.epoch
        if epoch is None:
            raise Deposed("no longer the leader")
        return epoch

    def _merged(self, stepped: list[ReplicaSpan], b: float) -> dict[str, ReplicaSpan]:
        """The spans after a step, with what a reconcile pass sampled while it was written (a new replica, an
        end); spans ended by `b` are done."""
        assert self._spans is not None
        out = {s.id: s for s in stepped}
        for sid, seen in self._spans.items():
            s = out.setdefault(sid, seen)
            if s is seen:
                continue
            if s.ended_at is None:
                s.ended_at = seen.ended_at
            if s.ready_at is None:
                s.ready_at = seen.ready_at
            # sleeps and wakes sampled while the step was written: a lost sleep ran one user's residency on through
            # the next user's. The step dropped those that ended before its residency; they stay dropped
            ends = dict(s.asleep)
            for x, y in seen.asleep:
                if x in ends:
                    ends[x] = ends[x] if ends[x] is not None else y
                elif y is None or y >= s.residency_from:
                    ends[x] = y
            s.asleep = sorted(ends.items(), key=lambda iv: iv[0])
        return {sid: s for sid, s in out.items() if s.ended_at is None or s.ended_at > b}

    def sample_now(self) -> None:
        """Between ticks (after each reconcile pass): a span ends, sleeps or wakes when its replica does."""
        if self._spans is not None and self._leadership.leading:
            self.sample(self._spans)

    def sample(self, spans: dict[str, ReplicaSpan]) -> None:
        """New replicas get a span; a span's readiness, sleeps and end follow its replica's record."""
        reg, now = self._registry, self._clock.now()
        for r in reg.replicas.values():
            s = spans.get(r.id)
            if not r.placed or (s is None and _charged(r, self._mark)):
                continue
            if s is None:
                s = spans[r.id] = span_of(r, reg.nodes, reg.models.get(r.model), self.cfg)
                self._dirty.add(r.id)
            was = _seen(s)
            follow(s, r, now)
            if _seen(s) != was:
                self._dirty.add(r.id)
        for s in spans.values():
            if s.ended_at is None and s.id not in reg.replicas:
                s.ended_at = max(now, s.created_at)
                self._dirty.add(s.id)


def _closed(r: UsageRecord, b: float, settle_after: float) -> bool:
    """Whether a request marked in flight needs no later window: it landed and ended by `b`, or its mark went
    unrenewed for settle_after (its router gone: its record, if a journal brings it back, is charged no further)."""
    end = r.started_at + r.duration_s
    return end <= b if r.status != IN_FLIGHT else end + settle_after <= b


def _charged(r: ReplicaRecord, mark: float) -> bool:
    """Released before the mark: nothing left to charge, so no new span each pass once its own is done."""
    return r.released and r.failed_at is not None and r.failed_at <= mark


def _seen(s: ReplicaSpan) -> tuple[object, ...]:
    """What sampling changes in a span."""
    return s.ready_at, s.ended_at, len(s.asleep), s.asleep[-1] if s.asleep else None


def span_of(r: ReplicaRecord, nodes: dict[str, NodeRecord], spec: ModelSpec | None,
            cfg: ChargebackConfig) -> ReplicaSpan:
    """A new replica's span: its GPUs over all its shards, the class their name prices them at, whether it is
    loaded on demand (its users pay for its load and idle time) or kept by the operator (min >= 1)."""
    names = replica_gpus(r, nodes)
    named = sorted(n for n in names if n != ("", ""))
    placed = r.condition(ConditionType.Scheduled)  # a replica waiting for room holds no GPU until it is placed
    held_from = max(r.created_at, placed.last_transition if placed is not None and placed.true else 0.0)
    cls = cfg.gpu_class(*named[0]) if named else NO_GPU
    return ReplicaSpan(id=r.id, model=r.model, gpus=len(names), gpu_class=cls,
                       demand=spec is None or spec.scaling.min == 0, created_at=held_from, residency_from=held_from,
                       keep_for=spec.scaling.stop_unused_after if spec is not None else 600.0)


def follow(s: ReplicaSpan, r: ReplicaRecord, now: float) -> None:
    """The span's readiness, sleeps and end as the record says them now."""
    if s.ready_at is None and r.ready_at is not None:
        s.ready_at = r.ready_at
    last = s.asleep[-1] if s.asleep else None
    if r.sleep_level and r.slept_at is not None and (last is None or last[1] is not None):
        s.asleep.append((max(r.slept_at, s.accounted_to), None))
    elif not r.sleep_level and last is not None and last[1] is None:
        woke = r.woken_at if r.woken_at is not None and r.woken_at >= last[0] else now
        s.asleep[-1] = (last[0], max(woke, s.accounted_to))
    if s.ended_at is None and r.released:
        s.ended_at = max(r.failed_at or now, s.created_at)


async def chargeback_loop(chargeback: Chargeback) -> None:
    """Chargeback's ticks, every SAMPLE_EVERY_S, for as long as the server runs."""
    while True:
        try:
            await chargeback.tick()
        except StoreError as e:  # unreachable: tried again on the next tick, from the store's mark
            log.warning("chargeback: %s", e)
            chargeback.forget()
        except Exception:  # logged and retried from the store, never swallowed silently
            log.exception("chargeback failed")
            chargeback.forget()
        await asyncio.sleep(SAMPLE_EVERY_S)
