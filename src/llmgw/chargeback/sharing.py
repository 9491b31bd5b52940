"""Processor sharing: the requests in flight on a replica share its GPUs equally at each instant."""

from __future__ import annotations

from collections.abc import Sequence


def busy_shares(spans: Sequence[tuple[str, float, float]], lo: float, hi: float, g: float
                ) -> tuple[dict[str, float], float]:
    """Each request's GPU-seconds in [lo, hi) (the integral of g/n over its time in flight there, n the requests in
    flight) and how long at least one was in flight. `spans` are (id, start, end). One sort, one sweep: a
    request's share is W(end) - W(start), W the running integral of g/n."""
    events: list[tuple[float, int, str]] = []
    for rid, s, e in spans:
        s, e = max(s, lo), min(e, hi)
        if e > s:
            events.append((s, 1, rid))
            events.append((e, -1, rid))
    events.sort(key=lambda ev: (ev[0], ev[1]))  # ends before starts at one instant
    shares: dict[str, float] = {}
    w, n, last, busy = 0.0, 0, lo, 0.0
    for t, step, rid in events:
        if n:
            w += g * (t - last) / n
            busy += t - last
        last = t
        n += step
        shares[rid] = shares.get(rid, 0.0) + (w if step < 0 else -w)
    return shares, busy
