"""Every key's counters against its limits (core/quota.py decides), kept in the control plane's process: the one
place every router process asks, its own in-process router directly and API workers through the management API.
A request admitted holds a ticket until it is settled; a ticket never settled (its worker died) is settled at its
whole reservation after TICKET_TTL_S. What each key was charged is kept per kind of period (Spent), so a budget
added, or moved to another period, counts what was spent before."""

from __future__ import annotations

import itertools
import secrets
from dataclasses import dataclass

from llmgw.core import quota
from llmgw.core.clock import Clock
from llmgw.core.quota import Decision, KeyCounters, KeyLimits, Period, Spent
from llmgw.store.base import ApiKeyRecord, UsageTotal
from llmgw.wire.router import Admission

TICKET_TTL_S = 3600.0  # longer than any request may last (first-byte 600 s, then idle gaps) before it is settled
MAX_TICKETS = 1_000_000
RELEASED_TTL_S = 600.0  # how long a ticket released before its admission arrived is remembered (refused if it comes)
MAX_RELEASED = 100_000


@dataclass
class Ticket:
    key_id: str
    cost: int
    at: float  # monotonic
    wall: float  # when it was admitted: the budget periods its tokens count in


class Quotas:
    def __init__(self, clock: Clock, default: KeyLimits) -> None:
        self.clock = clock
        self.default = default
        self.counters: dict[str, KeyCounters] = {}
        self.spent: dict[str, Spent] = {}  # what each key was charged, per kind of period (before this start too)
        self.tickets: dict[str, Ticket] = {}
        # tickets settled that were never admitted (a worker whose admission answer was lost releases the ticket it
        # chose): the admission, should it still arrive, is refused rather than holding a slot nobody will settle
        self.released: dict[str, float] = {}
        self._prefix, self._serial = secrets.token_hex(4) + "-", itertools.count()  # tickets unique per process

    def limits_of(self, key: ApiKeyRecord) -> KeyLimits:
        return key.limits if key.limits is not None else self.default

    def seed(self, period: Period, start: float, totals: list[UsageTotal]) -> None:
        """What keys spent in the period starting at `start`, as the store's aggregates say (kept where more than
        what is counted here): at a start, and when a key's limits change."""
        per_key: dict[str, int] = {}
        for t in totals:
            per_key[t.key_id] = per_key.get(t.key_id, 0) + t.prompt_tokens + t.completion_tokens
        for key_id, n in per_key.items():
            self.spent.setdefault(key_id, Spent()).at_least(period, start, n)

    def spent_in(self, key_id: str, period: Period) -> int:
        """Tokens `key_id` was charged in the period of that kind holding now."""
        s = self.spent.get(key_id)
        return 0 if s is None else s.of(period, self.clock.now())

    def admit(self, key: ApiKeyRecord, cost: int, ticket: str = "") -> tuple[Decision, str]:
        """Admit one request of `key` reserving `cost` tokens: the decision, and the ticket to settle it with ("" when
        the key has no limits: nothing to settle). `ticket`: the one the asking worker chose (so it can release it
        when the answer is lost); one is made here when none is given."""
        lim = self.limits_of(key)
        if not lim.any():
            return Decision(True), ""
        self._expire()
        if ticket and (ticket in self.tickets or ticket in self.released):
            return Decision(False, quota.Refusal.Rate, "this admission was withdrawn by the router that asked for "
                            "it (its answer was lost): ask again", 1.0), ""
        now, mono = self.clock.now(), self.clock.monotonic()
        c = self.counters.get(key.id)
        if c is None:
            c = self.counters[key.id] = KeyCounters()
        spent = self.spent_in(key.id, lim.budget_period) if lim.budget is not None else 0
        d = quota.admit(c, lim, cost, spent, now, mono)
        if not d.admitted:
            return d, ""
        ticket = ticket or f"{self._prefix}{next(self._serial)}"
        self.tickets[ticket] = Ticket(key.id, cost, mono, now)
        return d, ticket

    def admission(self, key: ApiKeyRecord, cost: int, ticket: str = "") -> Admission:
        """admit(), as the wire says it (for any router process)."""
        d, ticket = self.admit(key, cost, ticket)
        # made from our own values: not validated again (this is on every limited request's path)
        return Admission.model_construct(admitted=d.admitted, refusal=d.refusal.value if d.refusal else "",
                                         message=d.message, retry_after=d.retry_after, headers=list(d.headers),
                                         ticket=ticket)

    def settle(self, ticket: str, used: int) -> bool:
        """The request holding `ticket` ended having used `used` tokens (0 and never admitted: its worker released
        it). False: no such ticket (settled already, or its admission has not arrived: it will be refused)."""
        t = self.tickets.pop(ticket, None)
        if t is None:
            self._release(ticket)
            return False
        c = self.counters.get(t.key_id)
        if c is not None:
            quota.settle(c, t.cost, used, self.clock.monotonic())
        self.spent.setdefault(t.key_id, Spent()).charge(max(0, used), t.wall)
        return True

    def _release(self, ticket: str) -> None:
        mono = self.clock.monotonic()
        self.released[ticket] = mono
        while self.released:
            oldest, at = next(iter(self.released.items()))
            if mono - at <= RELEASED_TTL_S and len(self.released) <= MAX_RELEASED:
                break
            del self.released[oldest]

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
        """A key's use against its limits, for people (ctl keys list). Reads; makes no counters."""
        lim = self.limits_of(key)
        c = self.counters.get(key.id) or KeyCounters()
        for b in (c.requests, c.tokens):
            if b is not None:
                b.refill(self.clock.monotonic())
        return {
            "limits": lim.model_dump(exclude_none=True), "own_limits": key.limits is not None,
            "in_flight": c.in_flight,
            "requests_left": None if c.requests is None else int(c.requests.level),
            "tokens_left": None if c.tokens is None else int(c.tokens.level),
            "budget_used": self.spent_in(key.id, lim.budget_period) + c.reserved if lim.budget is not None else None,
        }
