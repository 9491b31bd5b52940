"""Busy time by the work done in it: each stretch of a replica's time with requests in flight is split among those
requests by the tokens they processed in it (docs/tenants.md, "Chargeback: how GPU time is attributed")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

Flight = tuple[str, float, float, float]  # request id, start, end, its work (weighted tokens) over all its time


def busy_shares(flights: Sequence[Flight], lo: float, hi: float, g: float,
                key_of: Mapping[str, str] | None = None) -> tuple[dict[str, float], float]:
    """Each request's GPU-seconds in [lo, hi) and how long at least one was in flight there. Requests whose times in
    flight overlap, directly or through others, form one busy stretch; its g x length GPU-seconds go to them in
    proportion to the work each did inside [lo, hi) (its work times the share of its time in flight that lies
    there: tokens are taken to flow evenly over a request's time). A request that reports no work beside others that
    do (a stream cut short, a client that left before its usage) is taken to have worked at their rate over its own
    time in flight: it reported nothing, not that it cost nothing, and its neighbours paid its time. A stretch whose
    requests report no work is split by their time in flight. No key (`key_of`: request id to key; else each request
    its own) pays more of a stretch than the GPUs times the time its own requests were in flight in it, what it
    would pay alone: the rest goes to the others by their work (a 1 s request of 100 tokens beside a 100 s one of 1
    token paid 99 of the 100 GPU-seconds). One sort, one pass."""
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
        _share_stretch(stretch, g * length, g, key_of or {}, shares)
        i = j + 1
    return shares, busy


def _share_stretch(stretch: list[tuple[float, float, str, float]], gpu_s: float, g: float, key_of: Mapping[str, str],
                   shares: dict[str, float]) -> None:
    """A stretch's GPU-seconds by work (by time in flight where none reports work), no key over its cap (the GPUs
    times the union of its requests' times in it): what a capped key would have had goes to the others the same
    way, until none is over."""
    keys: dict[str, list[tuple[float, float, str, float]]] = {}
    for item in stretch:
        keys.setdefault(key_of.get(item[2], item[2]), []).append(item)
    by_time = sum(w for *_, w in stretch) <= 0
    weight = {k: sum((ce - cs) if by_time else w for cs, ce, _, w in items) for k, items in keys.items()}
    cap = {k: g * _union(items) for k, items in keys.items()}
    got: dict[str, float] = {}
    left, open_ = gpu_s, set(keys)
    while open_:
        total = sum(weight[k] for k in open_)
        offer = {k: left * weight[k] / total if total > 0 else left / len(open_) for k in open_}
        over = {k for k in open_ if offer[k] > cap[k]}
        if not over:
            got.update(offer)
            break
        for k in over:
            got[k] = cap[k]
            left -= cap[k]
        open_ -= over
    for k, items in keys.items():
        total = weight[k]
        for cs, ce, rid, w in items:
            part = ((ce - cs) if by_time else w) / total if total > 0 else 1 / len(items)
            shares[rid] = shares.get(rid, 0.0) + got.get(k, 0.0) * part


def _union(items: list[tuple[float, float, str, float]]) -> float:
    """The length of the union of the items' [start, end)."""
    out, cur_s, cur_e = 0.0, None, 0.0
    for cs, ce, *_ in sorted(items):
        if cur_s is None or cs > cur_e:
            out += 0.0 if cur_s is None else cur_e - cur_s
            cur_s, cur_e = cs, ce
        else:
            cur_e = max(cur_e, ce)
    return out + (0.0 if cur_s is None else cur_e - cur_s)


def _imputed(stretch: list[tuple[float, float, str, float]]) -> list[tuple[float, float, str, float]]:
    """The stretch with each workless request given the work of its time at the rate of those that did work."""
    worked = [(ce - cs, w) for cs, ce, _, w in stretch if w > 0]
    if not worked or len(worked) == len(stretch):
        return stretch
    rate = sum(w for _, w in worked) / max(sum(t for t, _ in worked), 1e-12)
    return [(cs, ce, rid, w if w > 0 else rate * (ce - cs)) for cs, ce, rid, w in stretch]
