"""Every key's counters against its limits (core/limits.py decides), kept in the control plane's process: the one
place every router process asks, its own in-process router directly and API workers through the management API.
A request admitted holds a ticket until it is settled; a ticket never settled (its worker died) is settled at its
whole reservation after TICKET_TTL_S. What each key was charged is kept per kind of period (Spent), so a budget
added, or moved to another period, counts what was spent before."""

from __future__ import annotations

import itertools
import secrets
from dataclasses import dataclass

from llmgw.api.router import Admission
from llmgw.control.tenants.gpu_budgets import NOTHING, GpuBudgets, keep_fresh
from llmgw.core import gpu_budget
from llmgw.core import limits as key_limits
from llmgw.core.clock import Clock
from llmgw.core.gpu_budget import GpuUse
from llmgw.core.limits import AdmissionDecision, KeyCounters, KeyLimits, Period, Spent
from llmgw.store.base import ApiKeyRecord, UsageTotal

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
    model: str = ""
    gpu: GpuUse = NOTHING  # what it holds of GPU budgets (core/gpu_budget.py)


class LimitCounters:
    def __init__(self, clock: Clock, default: KeyLimits, gpu: GpuBudgets | None = None) -> None:
        self.clock = clock
        self.default = default
        self.gpu = gpu or GpuBudgets(clock, "USD")  # budgets in GPU-seconds or money
        self.counters: dict[str, KeyCounters] = {}
        self.spent: dict[str, Spent] = {}  # what each key was charged, per kind of period (before this start too)
        self.tickets: dict[str, Ticket] = {}
        # tickets settled that were never admitted (a worker whose admission answer was lost releases the ticket it
        # chose): the admission, should it still arrive, is refused rather than holding a slot nobody will settle
        self.released: dict[str, float] = {}
        self._prefix, self._serial = secrets.token_hex(4) + "-", itertools.count()  # tickets unique per process
        # several servers on one store (control/activity/sharing.py): what this one admitted per key, cumulative
        # (requests, tokens taken net of what settling gave back), and what the others say of theirs
        self.taken: dict[str, list[int]] = {}  # key -> [requests, tokens taken net, tokens spent] admitted here
        self._seen: dict[tuple[str, str, str], int] = {}  # (server, kind, key) -> its cumulative count last read
        self._elsewhere: dict[str, dict[str, tuple[float, int, int]]] = {}  # key -> server -> (at, in flight, held)
        self._pending: dict[str, tuple[float, int, int]] = {}  # key -> (monotonic, requests, tokens) taken elsewhere
        self._fresh = 30.0  # how old a row of in-flight counts may be and still count (absorb says)

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

    def admit(self, key: ApiKeyRecord, cost: int, ticket: str = "", model: str = "") -> tuple[AdmissionDecision, str]:
        """Admit one request of `key` to `model` reserving `cost` tokens: the decision, and the ticket to settle it
        with ("" when the key has no limits: nothing to settle). `ticket`: the one the asking worker chose (so it
        can release it when the answer is lost); one is made here when none is given."""
        lim = self.limits_of(key)
        if not lim.any():
            return AdmissionDecision(True), ""
        self._expire()
        if ticket and (ticket in self.tickets or ticket in self.released):
            return AdmissionDecision(False, key_limits.LimitRefusal.Rate, "this admission was withdrawn by the router "
                                     "that asked for it (its answer was lost): ask again", 1.0), ""
        now, mono = self.clock.now(), self.clock.monotonic()
        c = self.counters.get(key.id)
        if c is None:
            c = self.counters[key.id] = KeyCounters()
        self._from_elsewhere(key.id, c, lim, now, mono)
        gpu = NOTHING
        if lim.gpu_limited():
            gpu = self.gpu.ask(model, cost)
            d = gpu_budget.check(lim, self.gpu.spent(key.id, lim.budget_period, now),
                                 self.gpu.unlanded(key.id, now), gpu, now, self.gpu.currency)
            if not d.admitted:
                return d, ""
        spent = self.spent_in(key.id, lim.budget_period) if lim.budget is not None else 0
        d = key_limits.admit(c, lim, cost, spent, now, mono)
        if not d.admitted:
            return d, ""
        ticket = ticket or f"{self._prefix}{next(self._serial)}"
        self.tickets[ticket] = Ticket(key.id, cost, mono, now, model, gpu)
        self.gpu.hold(key.id, gpu)
        taken = self.taken.setdefault(key.id, [0, 0, 0])
        taken[0] += 1
        taken[1] += cost
        return d, ticket

    def admission(self, key: ApiKeyRecord, cost: int, ticket: str = "", model: str = "") -> Admission:
        """admit(), as the wire says it (for any router process)."""
        d, ticket = self.admit(key, cost, ticket, model)
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
            key_limits.settle(c, t.cost, used, self.clock.monotonic())
        taken = self.taken.get(t.key_id)
        if taken is not None:
            taken[1] -= max(0, t.cost - max(0, used))  # given back to the bucket here: the others' too
            taken[2] += max(0, used)  # charged to the budget here: the others' too
        self.spent.setdefault(t.key_id, Spent()).charge(max(0, used), t.wall)
        if t.gpu != NOTHING:
            self.gpu.hold(t.key_id, t.gpu, -1)
            if used > 0:  # it reached an engine: held its model's GPUs at most as long as it was admitted
                self.gpu.settled(t.key_id, t.model, self.clock.monotonic() - t.at, self.clock.now())
        return True

    def shared(self) -> dict[tuple[str, str], int]:
        """This server's counts per key for the others sharing the store: (kind, key id) -> n (sharing.KEY_KINDS)."""
        out: dict[tuple[str, str], int] = {}
        for key_id, (requests, tokens, spent) in self.taken.items():
            c = self.counters.get(key_id)
            out.update({("kreq", key_id): requests, ("ktok", key_id): tokens, ("kspd", key_id): spent,
                        ("kinf", key_id): c.in_flight if c else 0, ("kres", key_id): c.reserved if c else 0})
        return out | self.gpu.shared()

    def absorb(self, rows: list[tuple[str, str, str, float, int]], now: float, fresh: float,
               first: bool = False) -> None:
        """What the other servers say of their keys' use (`rows`: (server, kind, key, at, n)). Requests and tokens
        admitted there since last read are taken from this server's buckets at its next admission of the key: all
        of a count first seen after this server's `first` read (it began meanwhile), none of one seen at that read
        (what it counted before). In flight and held count from rows at most `fresh` seconds old (a server that
        stops saying so has stopped)."""
        mono = self.clock.monotonic()
        for server, kind, key_id, at, n in rows:
            if kind in ("kreq", "ktok", "kspd"):
                before = self._seen.get((server, kind, key_id), None if first else 0)
                self._seen[(server, kind, key_id)] = n
                if before is None or n == before:
                    continue
                if kind == "kspd":  # settled there: spent here too (the store's figures, read later, are the same)
                    if n > before:
                        self.spent.setdefault(key_id, Spent()).charge(n - before, now)
                    continue
                # tokens go down there when a request settles below its reservation: given back here as well
                _, req, tok = self._pending.get(key_id, (mono, 0, 0))
                self._pending[key_id] = (mono, req + (n - before if kind == "kreq" else 0),
                                         tok + (n - before if kind == "ktok" else 0))
            elif kind in ("kgpu", "kcst"):
                self.gpu.heard(server, kind, key_id, at, n)
            elif kind in ("kinf", "kres"):
                had = self._elsewhere.setdefault(key_id, {}).get(server, (at, 0, 0))
                self._elsewhere[key_id][server] = (max(at, had[0]), n if kind == "kinf" else had[1],
                                                   n if kind == "kres" else had[2])
        self._fresh = fresh
        self.gpu.forget_silent(now, fresh)
        keep_fresh(self._elsewhere, now, fresh)

    def _from_elsewhere(self, key_id: str, c: KeyCounters, lim: KeyLimits, now: float, mono: float) -> None:
        """Before an admission: what the other servers took since (from this server's buckets) and hold now."""
        pending = self._pending.pop(key_id, None)
        if pending is not None and mono - pending[0] < 60.0:  # older: a minute's refill has covered it
            key_limits.prepare(c, lim, mono)
            key_limits.taken_elsewhere(c, pending[1], pending[2], mono)
        live = [v for v in self._elsewhere.get(key_id, {}).values() if now - v[0] <= self._fresh]
        c.in_flight_elsewhere = sum(v[1] for v in live)
        c.reserved_elsewhere = sum(v[2] for v in live)

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
        } | self._gpu_use(key.id, lim)

    def _gpu_use(self, key_id: str, lim: KeyLimits) -> dict[str, object]:
        """A key's GPU-seconds and money spent in its budget's period, and held by its requests in flight."""
        if not lim.gpu_limited():
            return {}
        now = self.clock.now()
        use = self.gpu.spent(key_id, lim.budget_period, now) + self.gpu.unlanded(key_id, now)
        return {"gpu_used": round(use.gpu_s, 3), "cost_used": round(use.cost, 6), "currency": self.gpu.currency}
