"""Over random traces, every window's GPU time goes to exactly one party: the window's charges plus what it left
pending equal the GPUs times the time held awake, and once every replica has ended nothing is left pending; with
requests' waits for loads among them, which share loads by who asked."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmgw.chargeback import charge_window, held_pieces
from llmgw.records.chargeback import ReplicaSpan
from llmgw.store.base import UsageRecord
from tests.chargeback.test_gpu_time_attribution import CONFIG, req, span
from tests.tiers import examples

END = 100.0


@st.composite
def traces(draw: st.DrawFn) -> tuple[list[ReplicaSpan], list[UsageRecord], float]:
    spans, reqs = [], []
    for j in range(draw(st.integers(0, 6))):  # requests' waits for the model's load (every span's model is "m")
        start = draw(st.floats(0, END))
        reqs.append(req(draw(st.sampled_from("ABC")), start, draw(st.floats(0, 30)), replica="", id=f"w{j:07d}"))
    for i in range(draw(st.integers(1, 3))):
        created = draw(st.floats(0, 60))
        ended = draw(st.floats(created, END))
        ready = draw(st.one_of(st.none(), st.floats(created, END)))
        asleep: list[tuple[float, float | None]] = []
        t = created
        for _ in range(draw(st.integers(0, 2))):
            x = draw(st.floats(t, END))
            y = draw(st.one_of(st.none(), st.floats(x, END)))
            asleep.append((x, y))
            if y is None:
                break
            t = y
        spans.append(span(id=f"r{i}", gpus=draw(st.integers(0, 8)), created=created, ready=ready,
                          demand=draw(st.booleans()), ended=ended, asleep=asleep))
        for j in range(draw(st.integers(0, 8))):
            start = draw(st.floats(created, ended))
            reqs.append(req(draw(st.sampled_from("ABC")), start, draw(st.floats(0, 20)), replica=f"r{i}",
                            id=f"q{i:02d}{j:06d}"))
    return spans, reqs, draw(st.sampled_from([1.0, 2.5, 7.0, 30.0]))


def held(s: ReplicaSpan, a: float, b: float) -> float:
    lo, hi = max(a, s.created_at), min(b, END if s.ended_at is None else s.ended_at)
    return max(s.gpus, 1) * sum(p1 - p0 for p0, p1 in held_pieces(s, lo, hi))


def pending(spans: list[ReplicaSpan]) -> float:
    return sum(s.pending_s + s.pending_idle_s for s in spans)


@settings(max_examples=examples(300), deadline=None)
@given(traces())
def test_each_window_charges_exactly_the_gpu_time_held(trace: tuple[list[ReplicaSpan], list[UsageRecord],
                                                                     float]) -> None:
    spans, reqs, w = trace
    expected = sum(held(s, 0, END) for s in spans)
    charged, a = 0.0, 0.0
    while a < END + w:
        b = a + w
        inside = [r for r in reqs if r.started_at < b and r.started_at + r.duration_s >= a and r.replica_id]
        waits = [r for r in reqs if not r.replica_id and r.started_at < b]
        acc = charge_window(a, b, spans, inside, CONFIG, waits)
        window = sum(r.gpu_s for r in acc.rows)
        assert window + pending(acc.spans) - pending(spans) == pytest.approx(sum(held(s, a, b) for s in spans),
                                                                            rel=1e-9, abs=1e-9)
        assert all(r.busy_s >= 0 and r.load_s >= 0 and r.idle_s >= 0 for r in acc.rows)
        charged += window
        spans, a = acc.spans, b
    assert pending(spans) == 0.0
    assert charged == pytest.approx(expected, rel=1e-9, abs=1e-9)
