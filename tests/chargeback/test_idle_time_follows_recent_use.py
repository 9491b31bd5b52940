"""Idle time goes to the keys that used the residency within the model's stop_unused_after (keep_for) before it, by
their busy time; past that, to the last key to use it. Replayed from outside: a heavy key used an 8-GPU replica
for an hour, then a light key pinged it every 500 s for a day, keeping it warm. Split by busy time over the whole
residency, the heavy key paid 637,046 idle GPU-seconds for the light key's day; alone, the replica would have
stopped 600 s after its last request and it would have paid 4,800. Charged window by window as chargeback does,
GPU time conserved throughout."""

from __future__ import annotations

import pytest

from llmgw.chargeback import charge_window
from tests.chargeback.test_gpu_time_attribution import CONFIG, req, span

G = 8
HEAVY_S = 3600.0
DAY = 86400.0


def charged(light: bool) -> dict[str, float]:
    """Idle GPU-seconds per key over 25 hours of 60 s windows (the light key's pings only when `light`)."""
    reqs = [req("heavy", t, 10.0, completion=100, prompt=0) for t in range(0, int(HEAVY_S), 10)]
    if light:
        reqs += [req("light", HEAVY_S + t, 0.03, completion=1, prompt=0) for t in range(500, int(DAY), 500)]
    s = span(gpus=G)
    end = HEAVY_S + DAY if light else HEAVY_S + 600.0  # alone: stopped stop_unused_after past its last request
    s.keep_for = 600.0
    idle: dict[str, float] = {}
    total = 0.0
    a = 0.0
    while a < end:
        b = a + 60.0
        if b >= end:
            s.ended_at = end
        window = [r for r in reqs if r.started_at < b and r.started_at + r.duration_s > a]
        acc = charge_window(a, b, [s], window, CONFIG)
        (s,) = acc.spans
        for row in acc.rows:
            idle[row.key_id] = idle.get(row.key_id, 0.0) + row.idle_s
            total += row.busy_s + row.load_s + row.idle_s
        a = b
    assert total == pytest.approx(G * end), "GPU time conserved"
    return idle


def test_a_key_pinging_the_model_pays_for_keeping_it_warm_not_its_earlier_heavy_user() -> None:
    alone = charged(light=False)["heavy"]
    assert alone == pytest.approx(G * 600.0, rel=0.02)
    idle = charged(light=True)
    assert idle["heavy"] <= 1.2 * alone, idle  # before: 637,046
    assert idle["light"] >= G * (DAY - 1200.0), idle
