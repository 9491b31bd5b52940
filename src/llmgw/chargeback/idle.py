"""Idle time instant by instant (docs/tenants.md, "Chargeback: how GPU time is attributed"): each stretch of a
residency with no request in flight goes to the keys that used it within its keep_for before that instant, by the
busy time each used in it; with none so recent, to the last to use it (kept warm for whoever comes, and last kept by
them); before anyone used it, it waits with the load for the residency's trigger. Taken at one moment per window
instead, a key's first request paid for idle time from before it arrived, time the replica would not have been held
for it alone (found by the adversarial property test)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import pairwise
from typing import Protocol

INF = math.inf


class Used(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def key_id(self) -> str: ...
    @property
    def started_at(self) -> float: ...
    @property
    def duration_s(self) -> float: ...


def idle_gaps(reqs: Sequence[Used], shares: Mapping[str, float], q0: float, p1: float, keys: dict[str, float],
              used_at: dict[str, float]) -> Iterator[tuple[float, float]]:
    """Each stretch [u, v) of [q0, p1) with no request in flight; `keys` (busy use of the residency per key) and
    `used_at` (each key's last use), as they stood before the piece, are brought up to u before each is yielded
    (read them then). `shares`: each request's busy GPU-seconds in the piece."""
    flights = sorted((max(r.started_at, q0), min(r.started_at + r.duration_s, p1), r.id, r.key_id) for r in reqs)
    cur = q0
    for cs, ce, rid, key in flights:
        if ce <= cs:
            continue
        if cs > cur:
            yield cur, cs
        gs = shares.get(rid, 0.0)
        if gs > 0:
            keys[key] = keys.get(key, 0.0) + gs
            used_at[key] = max(used_at.get(key, -INF), ce)
        cur = max(cur, ce)
    if cur < p1:
        yield cur, p1


def split_gap(u: float, v: float, g: float, keep_for: float, keys: Mapping[str, float],
              used_at: Mapping[str, float], charge: Callable[[str, float], None]) -> float:
    """A stretch [u, v) of idle time to the keys recent at each instant of it; what no key used yet is returned
    (it waits for the trigger)."""
    users = {k: w for k, w in keys.items() if w > 0}
    if not users:
        return g * (v - u)
    cuts = sorted({u, v, *(used_at.get(k, -INF) + keep_for for k in users
                           if u < used_at.get(k, -INF) + keep_for < v)})
    for t1, t2 in pairwise(cuts):
        recent = {k: w for k, w in users.items() if used_at.get(k, -INF) + keep_for > t1}
        if not recent:
            last = max(users, key=lambda k: (used_at.get(k, -INF), k))
            recent = {last: users[last]}
        total = sum(recent.values())
        for key, w in sorted(recent.items()):
            charge(key, g * (t2 - t1) * w / total)
    return 0.0
