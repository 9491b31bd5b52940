"""GPU time of one chargeback window [a, b) charged to the keys that caused it (docs/tenants.md, "Chargeback: how GPU
time is attributed"): load to the keys whose requests waited for it (else the request that first reached it), busy
time shared by the tokens its requests processed, idle time split by the keys that used the residency lately; a
min >= 1 model's load and idle time the operator's."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from llmgw.chargeback.idle import idle_gaps, split_gap
from llmgw.chargeback.sharing import busy_shares
from llmgw.config.chargeback import ChargebackConfig
from llmgw.records.chargeback import OPERATOR, ChargeRow, ReplicaSpan

HOUR = 3600.0
INF = math.inf


class ChargedRequest(Protocol):
    """What the model reads of a usage record: who sent it, where it ran, when it was in flight."""

    @property
    def id(self) -> str: ...
    @property
    def key_id(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def replica_id(self) -> str: ...
    @property
    def started_at(self) -> float: ...
    @property
    def duration_s(self) -> float: ...
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def completion_tokens(self) -> int: ...


def work(r: ChargedRequest, prompt_weight: float) -> float:
    """A request's work: the tokens it processed as its engine counted them, a prompt token weighing
    `prompt_weight` of a generated one."""
    return prompt_weight * r.prompt_tokens + r.completion_tokens


@dataclass(frozen=True)
class WindowCharges:
    """One window's charges, the spans as they stand after it, and each request's busy GPU-seconds in it."""

    rows: list[ChargeRow]
    spans: list[ReplicaSpan]
    shares: dict[str, float]


@dataclass
class _Ledger:
    model: str = ""
    gpu_class: str = ""
    prompt_weight: float = 1.0
    sums: dict[tuple[str, str, str], list[float]] = field(default_factory=dict)

    def add(self, key: str, busy: float = 0.0, load: float = 0.0, idle: float = 0.0) -> None:
        acc = self.sums.setdefault((key, self.model, self.gpu_class), [0.0, 0.0, 0.0])
        acc[0] += busy
        acc[1] += load
        acc[2] += idle

    def rows(self, hour: int, config: ChargebackConfig) -> list[ChargeRow]:
        return [ChargeRow(hour=hour, key_id=key, model=model, gpu_class=cls, busy_s=v[0], load_s=v[1], idle_s=v[2],
                          cost=(v[0] + v[1] + v[2]) * config.rate(cls) / HOUR)
                for (key, model, cls), v in sorted(self.sums.items()) if v[0] + v[1] + v[2] > 0]


def charge_window(a: float, b: float, spans: Iterable[ReplicaSpan], requests: Iterable[ChargedRequest],
                  config: ChargebackConfig, waits: Iterable[ChargedRequest] = ()) -> WindowCharges:
    """Charge the window [a, b): every span's held time in it (less its asleep time) to exactly one party each
    instant, or to its pending time until the party is known. `requests` are the usage records overlapping it;
    `waits`, requests' waits for a model with no ready replica (replica_id empty: a load or wake they asked for)."""
    by_replica: dict[str, dict[str, ChargedRequest]] = {}
    in_model: dict[str, list[ChargedRequest]] = {}
    for r in requests:
        by_replica.setdefault(r.replica_id, {})[r.id] = r
        in_model.setdefault(r.model, []).append(r)
    by_model: dict[str, list[ChargedRequest]] = {}
    for w in waits:
        by_model.setdefault(w.model, []).append(w)
    ledger = _Ledger(prompt_weight=config.prompt_weight)
    shares: dict[str, float] = {}
    out = []
    for span in spans:
        ledger.model, ledger.gpu_class = span.model, span.gpu_class
        reqs = sorted(by_replica.get(span.id, {}).values(), key=lambda r: (r.started_at, r.id))
        if a <= span.created_at < b and span.accounted_to <= span.created_at and span.demand and not span.askers:
            span = span.model_copy(update={"askers": placed_for(span, in_model.get(span.model, []))})
        out.append(_charge_span(span, a, b, reqs, ledger, shares, by_model.get(span.model, [])))
    return WindowCharges(ledger.rows(int(a // HOUR), config), out, shares)


def placed_for(span: ReplicaSpan, model_requests: Iterable[ChargedRequest]) -> dict[str, float]:
    """Who a replica placed beside others of its model was placed for: the keys whose requests were in flight on
    the model's other replicas when it was placed (what the reconciler scaled up for), one share per request. Its
    load is theirs, not the first request's to reach it (a key racing to a new replica paid all of it before)."""
    out: dict[str, float] = {}
    for r in model_requests:
        if r.replica_id != span.id and r.replica_id and r.started_at <= span.created_at < r.started_at + r.duration_s:
            out[r.key_id] = out.get(r.key_id, 0.0) + 1.0
    return out


def held_pieces(span: ReplicaSpan, lo: float, hi: float) -> list[tuple[float, float]]:
    """[lo, hi) less the span's asleep intervals, in order."""
    pieces, cur = [], lo
    for x, y in sorted(span.asleep, key=lambda iv: iv[0]):
        end = INF if y is None else y
        if end <= cur:
            continue
        if x >= hi:
            break
        if x > cur:
            pieces.append((cur, min(x, hi)))
        cur = max(cur, end)
        if cur >= hi:
            break
    if cur < hi:
        pieces.append((cur, hi))
    return pieces


def _charge_span(span: ReplicaSpan, a: float, b: float, reqs: Sequence[ChargedRequest], led: _Ledger,
                  shares: dict[str, float], waits: Sequence[ChargedRequest]) -> ReplicaSpan:
    s = span.model_copy(deep=True)
    s.residency_from = max(s.residency_from, s.created_at)
    lo = max(a, s.created_at, s.accounted_to)
    hi = b if s.ended_at is None else min(b, s.ended_at)
    for p0, p1 in held_pieces(s, lo, hi):
        began = max([s.created_at] + [y for _, y in s.asleep if y is not None and y <= p0])
        if began > s.residency_from:  # woken: the residency before the sleep ends, a new one begins
            _close_residency(s, led)
            s.residency_from = began
        _charge_piece(s, p0, p1, reqs, led, shares, waits)
        if p1 < hi:  # put to sleep: its residency is over
            _close_residency(s, led)
    if s.ended_at is not None and s.ended_at <= b:
        _close_residency(s, led)
    s.accounted_to = max(s.accounted_to, b)
    # sleeps before the current residency are charged: only the one that ended at its start is read again
    s.asleep = [(x, y) for x, y in s.asleep if y is None or y >= s.residency_from]
    return s


def _charge_piece(s: ReplicaSpan, p0: float, p1: float, reqs: Sequence[ChargedRequest], led: _Ledger,
                   shares: dict[str, float], waits: Sequence[ChargedRequest] = ()) -> None:
    """One awake stretch [p0, p1) of the current residency: its load, busy and idle time."""
    g = float(max(s.gpus, 1))
    first = next((r for r in reqs if _since(s) <= r.started_at < p1), None)
    known = bool(s.trigger)  # the wake's first request landed in an earlier window: its load is over
    if first is not None and not s.trigger:
        s.trigger = first.key_id
    if s.residency_from == s.created_at:  # loading until first ready
        load_end = INF if s.ready_at is None else s.ready_at
    else:  # waking: the waking request waits for it
        load_end = p0 if known else first.started_at if first is not None else INF
    q0 = max(p0, min(load_end, p1))
    flights = [(r.id, r.started_at, r.started_at + r.duration_s, work(r, led.prompt_weight)) for r in reqs]
    busy, busy_t = busy_shares(flights, q0, p1, g, {r.id: r.key_id for r in reqs})
    keys0, used0 = dict(s.keys), dict(s.used_at)  # as they stood before this piece: idle time reads them by instant
    by_id = {r.id: r for r in reqs}
    for rid, gs in busy.items():
        if gs > 0:
            r = by_id[rid]
            shares[rid] = shares.get(rid, 0.0) + gs
            led.add(r.key_id, busy=gs)
            if s.demand:  # an operator's span never splits its idle time by key: nothing to carry
                s.keys[r.key_id] = s.keys.get(r.key_id, 0.0) + gs
                s.used_at[r.key_id] = max(s.used_at.get(r.key_id, -INF), min(r.started_at + r.duration_s, p1))
    load, idle = g * (q0 - p0), g * max(0.0, p1 - q0 - busy_t)
    if not s.demand:
        led.add(OPERATOR, load=load, idle=idle)
        return
    _charge_load(s, waits, p0, q0, load_end, g, led)
    for u, v in idle_gaps(reqs, busy, q0, p1, keys0, used0):
        s.pending_idle_s += split_gap(u, v, g, s.keep_for, keys0, used0, lambda k, t: led.add(k, idle=t))
    if s.pending_s and _load_to_party(s, s.pending_s, led):
        s.pending_s = 0.0
    if s.trigger and s.pending_idle_s:
        led.add(s.trigger, idle=s.pending_idle_s)
        s.pending_idle_s = 0.0


def _charge_load(s: ReplicaSpan, waits: Sequence[ChargedRequest], p0: float, q0: float, load_end: float, g: float,
                 led: _Ledger) -> None:
    """The load in [p0, q0), each instant to the keys that had asked for it by then (one share per waiting request:
    still waiting when the residency began, begun before its load ended, counted from when it began within the
    residency), else to its trigger, else pending. So a load's charge does not depend on where windows fall."""
    asks = sorted((max(w.started_at, s.residency_from), w.key_id) for w in waits
                  if w.started_at + w.duration_s > s.residency_from and p0 <= max(w.started_at, s.residency_from) < q0
                  and w.started_at < load_end)
    cur = p0
    for at, key in [*asks, (q0, "")]:
        part = g * (at - cur)
        if part > 0 and not _load_to_party(s, part, led):
            s.pending_s += part
        cur = max(cur, at)
        if key:
            s.askers[key] = s.askers.get(key, 0.0) + 1.0


def _load_to_party(s: ReplicaSpan, load: float, led: _Ledger) -> bool:
    """Load (or wake) time to the keys that asked for it, by how many of their requests waited for it (a key that
    asked and left before it was ready pays its share, whoever was served first), else to the residency's trigger;
    False when neither is known yet (the caller keeps it pending)."""
    if s.askers:
        total = sum(s.askers.values())
        for key, n in sorted(s.askers.items()):
            led.add(key, load=load * n / total)
    elif s.trigger:
        led.add(s.trigger, load=load)
    else:
        return False
    return True


def _since(s: ReplicaSpan) -> float:
    """Where the current residency's requests begin: the request that loads a replica, or wakes it, arrives before
    it is placed, or woken, and waits for it."""
    if s.residency_from == s.created_at:
        return -INF
    return max((x for x, y in s.asleep if y is not None and y <= s.residency_from), default=s.residency_from)


def _close_residency(s: ReplicaSpan, led: _Ledger) -> None:
    """A residency ended (slept, or the replica is gone): what still waits for a trigger is the trigger's, or with
    none the operator's (a load its askers asked for was handed to them as it was charged); the next residency
    starts afresh."""
    if s.pending_s or s.pending_idle_s:
        led.add(s.trigger or OPERATOR, load=s.pending_s, idle=s.pending_idle_s)
    s.pending_s = s.pending_idle_s = 0.0
    s.trigger = ""
    s.keys = {}
    s.used_at = {}
    s.askers = {}
