"""Tenant limits: what a key may use, and the decision to admit one request against it. Pure: the counters and
the time are handed in; control/tenants/limit_counters.py keeps the counters, in one place for every router process.

The rule: a request reserves the most it can cost (a token per byte of its body plus its `max_tokens`) before it
is forwarded, and is settled to what the engine reported after; nothing admitted can cost more than it reserved, so
concurrent requests never overspend a budget (docs/tenants.md, "Admission").
"""

from __future__ import annotations

import calendar
import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

from pydantic import Field

from llmgw.core.strict import Strict

Period = Literal["day", "month", "total"]


class KeyLimits(Strict):
    """What one key may use; each limit optional (None: none)."""

    rpm: int | None = Field(default=None, strict=True, ge=1, le=10**9)  # requests per minute
    tpm: int | None = Field(default=None, strict=True, ge=1, le=10**12)  # tokens (prompt + completion) per minute
    concurrency: int | None = Field(default=None, strict=True, ge=1, le=10**6)  # requests in flight at once
    budget: int | None = Field(default=None, strict=True, ge=1, le=10**15)  # tokens per budget_period
    # GPU-seconds, and money in chargeback.currency, per budget_period (core/gpu_budget.py)
    gpu_budget: float | None = Field(default=None, strict=True, gt=0, le=1e13, allow_inf_nan=False)
    cost_budget: float | None = Field(default=None, strict=True, gt=0, le=1e13, allow_inf_nan=False)
    budget_period: Period = "month"

    def any(self) -> bool:
        # asked on every request: no generator
        return (self.rpm is not None or self.tpm is not None or self.concurrency is not None
                or self.budget is not None or self.gpu_budget is not None or self.cost_budget is not None)

    def gpu_limited(self) -> bool:
        return self.gpu_budget is not None or self.cost_budget is not None


class LimitRefusal(StrEnum):
    Rate = "rate_limit_exceeded"  # requests or tokens per minute, or concurrency: retry later
    TooLarge = "request_too_large"  # one request larger than a minute's tokens: never admissible
    Quota = "insufficient_quota"  # the budget is spent until the period ends


@dataclass
class Bucket:
    """A token bucket of `capacity`, refilled at capacity per minute."""

    capacity: float
    level: float
    at: float  # monotonic seconds of `level`

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.at) * self.capacity / 60.0)
        self.at = now

    def wait_for(self, amount: float) -> float:
        """Seconds until `amount` is there (0: now)."""
        return max(0.0, (amount - self.level) * 60.0 / self.capacity)

    def full_in(self) -> float:
        return self.wait_for(self.capacity)


@dataclass
class KeyCounters:
    """One key's counters (control/tenants/limit_counters.py keeps one per key)."""

    requests: Bucket | None = None
    tokens: Bucket | None = None
    in_flight: int = 0
    reserved: int = 0  # tokens held by requests in flight
    # the same key's requests in flight and tokens they hold at the other servers sharing the store, as last read
    in_flight_elsewhere: int = 0
    reserved_elsewhere: int = 0


PERIODS: tuple[Period, ...] = ("day", "month", "total")


@dataclass
class Spent:
    """Tokens one key was charged, in each kind of period: the UTC day and month starting at `since[period]`, and
    in all. Kept for every period whatever the key's budget says now, so a budget added or changed to another
    period counts what was spent before the change."""

    since: dict[str, float] = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=dict)

    def add(self, period: Period, start: float, n: int) -> None:
        """Charge `n` tokens to the period starting at `start` (one already past is not counted any more)."""
        at = self.since.get(period)
        if at is not None and start < at:
            return
        self.tokens[period] = (self.tokens.get(period, 0) if at == start else 0) + n
        self.since[period] = start

    def charge(self, n: int, at: float) -> None:
        """`n` tokens used by a request admitted at `at` (wall clock): they count in the periods holding `at`, so a
        request that ends after midnight is charged to the day that admitted it."""
        for period in PERIODS:
            self.add(period, period_start(period, at), n)

    def at_least(self, period: Period, start: float, n: int) -> None:
        """What the store says was spent in the period starting at `start`: kept where more than counted here."""
        at = self.since.get(period)
        if at is None or at < start:
            self.since[period], self.tokens[period] = start, n
        elif at == start:
            self.tokens[period] = max(self.tokens.get(period, 0), n)

    def of(self, period: Period, now: float) -> int:
        """Tokens spent in the period holding `now`."""
        return self.tokens.get(period, 0) if self.since.get(period) == period_start(period, now) else 0


@dataclass(frozen=True)
class AdmissionDecision:
    admitted: bool
    refusal: LimitRefusal | None = None
    message: str = ""
    retry_after: float | None = None  # seconds; None: retrying will not help
    headers: tuple[tuple[str, str], ...] = ()  # x-ratelimit-*


DAY_S = 86400


def _year_month(now: float) -> tuple[int, int]:
    """The UTC year and month holding `now` (the civil-from-days algorithm: no clock or time zone is read)."""
    z = int(now // DAY_S) + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (1 if month <= 2 else 0), month


def period_start(period: Period, now: float) -> float:
    """Wall-clock start of the budget period holding `now` (UTC)."""
    if period == "total":
        return 0.0
    if period == "day":
        return float(now // DAY_S * DAY_S)
    year, month = _year_month(now)
    return float(calendar.timegm((year, month, 1, 0, 0, 0)))


def period_end(period: Period, now: float) -> float | None:
    if period == "total":
        return None
    if period == "day":
        return period_start("day", now) + DAY_S
    year, month = _year_month(now)
    year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return float(calendar.timegm((year, month, 1, 0, 0, 0)))


def reservation(body_bytes: int, max_tokens: int) -> int:
    """The most a request can cost: a token per byte of its body, and what it may generate."""
    return max(1, body_bytes) + max(0, max_tokens)


def duration(seconds: float) -> str:
    """OpenAI's way of writing a reset time: 1s, 6m0s, 1h2m3s; under a second in ms."""
    if seconds < 1:
        return f"{max(0, math.ceil(seconds * 1000))}ms"
    s = math.ceil(seconds)
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return (f"{h}h" if h else "") + (f"{m}m" if h or m else "") + f"{sec}s"


def prepare(c: KeyCounters, lim: KeyLimits, mono: float) -> None:
    """Make or resize the buckets for the key's current limits (a limit changed: the bucket follows, full)."""
    if lim.rpm is None:
        c.requests = None
    elif c.requests is None or c.requests.capacity != lim.rpm:
        c.requests = Bucket(lim.rpm, lim.rpm, mono)
    if lim.tpm is None:
        c.tokens = None
    elif c.tokens is None or c.tokens.capacity != lim.tpm:
        c.tokens = Bucket(lim.tpm, lim.tpm, mono)
    for b in (c.requests, c.tokens):
        if b is not None:
            b.refill(mono)


def rate_headers(c: KeyCounters) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    for name, b in (("requests", c.requests), ("tokens", c.tokens)):
        if b is not None:
            out += [(f"x-ratelimit-limit-{name}", str(int(b.capacity))),
                    (f"x-ratelimit-remaining-{name}", str(max(0, math.floor(b.level)))),
                    (f"x-ratelimit-reset-{name}", duration(b.full_in()))]
    return tuple(out)


def admit(c: KeyCounters, lim: KeyLimits, cost: int, spent: int, now: float, mono: float) -> AdmissionDecision:
    """Admit a request reserving `cost` tokens, taking from the counters, or say why not (changing nothing).
    `spent`: the tokens the key was charged in its budget's period holding `now`."""
    prepare(c, lim, mono)
    if lim.budget is not None:
        held = c.reserved + c.reserved_elsewhere
        if spent + held + cost > lim.budget:
            left = max(0, lim.budget - spent - held)
            end = period_end(lim.budget_period, now)
            when = f"; it renews in {duration(end - now)}" if end is not None else ""
            return AdmissionDecision(False, LimitRefusal.Quota, f"token budget spent: {spent + held} of {lim.budget} "
                                     f"tokens this {lim.budget_period} are used or held by requests in flight, {left} "
                                     f"left, and this request may cost up to {cost}{when}", None, rate_headers(c))
    if lim.concurrency is not None and c.in_flight + c.in_flight_elsewhere >= lim.concurrency:
        return AdmissionDecision(False, LimitRefusal.Rate, f"{c.in_flight + c.in_flight_elsewhere} requests in flight, "
                                 f"the limit is {lim.concurrency}", 1.0, rate_headers(c))
    if c.requests is not None and c.requests.level < 1:
        return AdmissionDecision(False, LimitRefusal.Rate, f"requests per minute: limit {lim.rpm}",
                                 c.requests.wait_for(1), rate_headers(c))
    if c.tokens is not None:
        if cost > c.tokens.capacity:
            return AdmissionDecision(False, LimitRefusal.TooLarge, f"this request may cost up to {cost} tokens, more "
                                     f"than the {int(c.tokens.capacity)} tokens per minute allowed: send less or a "
                                     "lower max_tokens", None, rate_headers(c))
        if c.tokens.level < cost:
            return AdmissionDecision(False, LimitRefusal.Rate, f"tokens per minute: limit {lim.tpm}, this request may "
                                     f"cost up to {cost}", c.tokens.wait_for(cost), rate_headers(c))
    if c.requests is not None:
        c.requests.level -= 1
    if c.tokens is not None:
        c.tokens.level -= cost
    c.in_flight += 1
    c.reserved += cost
    return AdmissionDecision(True, headers=rate_headers(c))


def taken_elsewhere(c: KeyCounters, requests: int, tokens: int, mono: float) -> None:
    """What other servers admitted for this key since last read comes out of this server's buckets too (below
    empty, they take longer to refill), so a per-minute limit holds across servers, late by one read; what they
    gave back (a request that used less than it reserved: `tokens` below 0) goes back in."""
    for b, n in ((c.requests, requests), (c.tokens, tokens)):
        if b is not None and n:
            b.refill(mono)
            b.level = min(b.capacity, max(-b.capacity, b.level - n))


def settle(c: KeyCounters, cost: int, used: int, mono: float) -> None:
    """A request that reserved `cost` ended having used `used` tokens: what it did not use is given back (the
    tokens used are charged to the key's Spent by its keeper)."""
    used = max(0, used)
    c.in_flight = max(0, c.in_flight - 1)
    c.reserved = max(0, c.reserved - cost)
    if c.tokens is not None:
        c.tokens.refill(mono)
        c.tokens.level = min(c.tokens.capacity, c.tokens.level + max(0, cost - used))
