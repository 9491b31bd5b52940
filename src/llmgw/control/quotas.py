"""Every key's counters against its limits (core/quota.py decides), kept in the control plane's process: the one
place every router process asks, its own in-process router directly and API workers through the management API.
A request admitted holds a ticket until it is settled; a ticket never settled (its worker died) is settled at its
whole reservation after TICKET_TTL_S."""

from __future__ import annotations

import itertools
import secrets
from dataclasses import dataclass

from llmgw.core import quota
from llmgw.core.clock import Clock
from llmgw.core.quota import Decision, KeyCounters, KeyLimits
from llmgw.store.base import ApiKeyRecord, UsageTotal
from llmgw.wire.router import Admission

TICKET_TTL_S = 3600.0  # longer than any request may last (first-byte 600 s, then idle gaps) before it is settled
MAX_TICKETS = 1_000_000


@dataclass
class Ticket:
    key_id: str
    cost: int
    at: float  # monotonic


class Quotas:
    def __init__(self, clock: Clock, default: KeyLimits) -> None:
        self.clock = clock
        self.default = default
        self.counters: dict[str, KeyCounters] = {}
        self.tickets: dict[str, Ticket] = {}
        self._prefix, self._serial = secrets.token_hex(4) + "-", itertools.count()  # tickets unique per process
        # tokens each key spent before this process started, by budget period start: read from the store at load
        self._spent_before: dict[tuple[str, float], int] = {}

    def limits_of(self, key: ApiKeyRecord) -> KeyLimits:
        return key.limits if key.limits is not None else self.default

    def seed(self, period_start: float, totals: list[UsageTotal]) -> None:
        """What keys spent from `period_start` on, before this process started (from the store's aggregates)."""
        for t in totals:
            k = (t.key_id, period_start)
            self._spent_before[k] = self._spent_before.get(k, 0) + t.prompt_tokens + t.completion_tokens

    def _counters(self, key_id: str, lim: KeyLimits, now: float) -> KeyCounters:
        c = self.counters.get(key_id)
        if c is None:
            c = self.counters[key_id] = KeyCounters()
        if lim.budget is not None:
            start = quota.period_start(lim.budget_period, now)
            if start != c.period_start:
                c.period_start, c.spent = start, self._spent_before.get((key_id, start), 0)
        return c

    def admit(self, key: ApiKeyRecord, cost: int) -> tuple[Decision, str]:
        """Admit one request of `key` reserving `cost` tokens: the decision, and the ticket to settle it with ("" when
        the key has no limits: nothing to settle)."""
        lim = self.limits_of(key)
        if not lim.any():
            return Decision(True), ""
        self._expire()
        now, mono = self.clock.now(), self.clock.monotonic()
        c = self._counters(key.id, lim, now)
        d = quota.admit(c, lim, cost, now, mono)
        if not d.admitted:
            return d, ""
        ticket = f"{self._prefix}{next(self._serial)}"
        self.tickets[ticket] = Ticket(key.id, cost, mono)
        return d, ticket

    def admission(self, key: ApiKeyRecord, cost: int) -> Admission:
        """admit(), as the wire says it (for any router process)."""
        d, ticket = self.admit(key, cost)
        # made from our own values: not validated again (this is on every limited request's path)
        return Admission.model_construct(admitted=d.admitted, refusal=d.refusal.value if d.refusal else "",
                                         message=d.message, retry_after=d.retry_after, headers=list(d.headers),
                                         ticket=ticket)

    def settle(self, ticket: str, used: int) -> bool:
        """The request holding `ticket` ended having used `used` tokens. False: no such ticket (settled already)."""
        t = self.tickets.pop(ticket, None)
        if t is None:
            return False
        c = self.counters.get(t.key_id)
        if c is not None:
            quota.settle(c, t.cost, used, self.clock.monotonic())
        return True

    def _expire(self) -> None:
        """Tickets past their TTL (a worker that died holding them) settle at their whole reservation; beyond
        MAX_TICKETS the oldest go the same way."""
        if not self.tickets:
            return
        mono = self.clock.monotonic()
        first = next(iter(self.tickets.values()))
        while self.tickets and (mono - first.at > TICKET_TTL_S or len(self.tickets) > MAX_TICKETS):
            ticket = next(iter(self.tickets))
            self.settle(ticket, first.cost)
            if self.tickets:
                first = next(iter(self.tickets.values()))

    def use_of(self, key: ApiKeyRecord) -> dict[str, object]:
        """A key's use against its limits, for people (ctl keys list)."""
        lim = self.limits_of(key)
        c = self.counters.get(key.id)
        if c is None:
            c = self._counters(key.id, lim, self.clock.now()) if lim.budget is not None else KeyCounters()
        for b in (c.requests, c.tokens):
            if b is not None:
                b.refill(self.clock.monotonic())
        return {
            "limits": lim.model_dump(exclude_none=True), "own_limits": key.limits is not None,
            "in_flight": c.in_flight,
            "requests_left": None if c.requests is None else int(c.requests.level),
            "tokens_left": None if c.tokens is None else int(c.tokens.level),
            "budget_used": c.spent + c.reserved if lim.budget is not None else None,
        }
