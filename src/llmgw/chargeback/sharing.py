"""Busy time by the work done in it: each stretch of a replica's time with requests in flight is split among those
requests by the tokens they processed in it (docs/tenants.md, "Chargeback: how GPU time is attributed")."""

from __future__ import annotations

from collections.abc import Sequence

Flight = tuple[str, float, float, float]  # request id, start, end, its work (weighted tokens) over all its time


def busy_shares(flights: Sequence[Flight], lo: float, hi: float, g: float) -> tuple[dict[str, float], float]:
    """Each request's GPU-seconds in [lo, hi) and how long at least one was in flight there. Requests whose times in
    flight overlap, directly or through others, form one busy stretch; its g x length GPU-seconds go to them in
    proportion to the work each did inside [lo, hi) (its work times the share of its time in flight that lies
    there: tokens are taken to flow evenly over a request's time). A request that reports no work beside others that
    do (a stream cut short, a client that left before its usage) is taken to have worked at their rate over its own
    time in flight: it reported nothing, not that it cost nothing, and its neighbours paid its time. A stretch whose
    requests report no work is split by their time in flight. One sort, one pass."""
    clipped = []
    for rid, s, e, work in flights:
        cs, ce = max(s, lo), min(e, hi)
        if ce > cs:
            part = (ce - cs) / (e - s)
            clipped.append((cs, ce, rid, max(0.0, work) * part))
    clipped.sort()
    shares: dict[str, float] = {}
    busy = 0.0
    i = 0
    while i < len(clipped):
        start, end, j = clipped[i][0], clipped[i][1], i
        while j + 1 < len(clipped) and clipped[j + 1][0] < end:  # touching is not overlapping: two stretches
            j += 1
            end = max(end, clipped[j][1])
        stretch = _imputed(clipped[i:j + 1])
        length = end - start
        busy += length
        total = sum(w for *_, w in stretch)
        by_time = total <= 0
        if by_time:
            total = sum(ce - cs for cs, ce, *_ in stretch)
        for cs, ce, rid, w in stretch:
            shares[rid] = shares.get(rid, 0.0) + g * length * ((ce - cs) if by_time else w) / total
        i = j + 1
    return shares, busy


def _imputed(stretch: list[tuple[float, float, str, float]]) -> list[tuple[float, float, str, float]]:
    """The stretch with each workless request given the work of its time at the rate of those that did work."""
    worked = [(ce - cs, w) for cs, ce, _, w in stretch if w > 0]
    if not worked or len(worked) == len(stretch):
        return stretch
    rate = sum(w for _, w in worked) / max(sum(t for t, _ in worked), 1e-12)
    return [(cs, ce, rid, w if w > 0 else rate * (ce - cs)) for cs, ce, rid, w in stretch]
