"""Adversarial traffic against honest traffic, over random traces: whatever the other key plays (pinging the model
to keep it warm, leaving before usage with no tokens reported, prompt-heavy floods, a long request of almost no
tokens held beside the honest ones, asking for the load and leaving), no key's charge passes what its own requests
can cost: busy time at most the GPUs times its own requests' time in flight, and in all at most the GPUs times,
per request of its own, its time in flight plus one load and one keep_for of idle (docs/tenants.md, "What the
attribution guarantees"). The failures this holds against: a 1 s request of 100 tokens beside a 100 s one of one
token paid 99 of 100 GPU-seconds; idle time split over a whole residency put 637,046 GPU-seconds on a key that
alone would have paid 4,800. The replica's life follows the traffic as llmgw's does: placed when a request finds
no replica, ready after its load, stopped keep_for after its last request ended; a request that arrives while it
loads waits for it (its wait marked). Conservation holds exactly too."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmgw.chargeback import charge_window
from llmgw.records.chargeback import OPERATOR, ReplicaSpan
from llmgw.store.base import UsageRecord
from tests.chargeback.test_gpu_time_attribution import CONFIG
from tests.tiers import examples

Ask = tuple[str, float, float, int, int]  # key, arrival, time in flight once served, prompt, completion tokens
WINDOW = 10.0


def lifecycle(asks: list[Ask], load: float, keep: float, gpus: int
              ) -> tuple[list[ReplicaSpan], list[UsageRecord], list[UsageRecord]]:
    """The spans, usage records and waits the traffic makes of one on-demand model."""
    spans: list[ReplicaSpan] = []
    reqs: list[UsageRecord] = []
    waits: list[UsageRecord] = []
    ready = last_end = -1.0
    for n, (key, at, dur, prompt, completion) in enumerate(sorted(asks, key=lambda a: (a[1], a[0]))):
        if not spans or at >= last_end + keep:  # none alive: one is placed for this request
            if spans:
                spans[-1].ended_at = last_end + keep
            ready = at + load
            spans.append(ReplicaSpan(id=f"r{len(spans)}", model="m", gpus=gpus, gpu_class="H100", demand=True,
                                     created_at=at, residency_from=at, ready_at=ready, keep_for=keep))
        start = max(at, ready)
        if at < ready:  # it waits for the load, and its router marks the wait
            waits.append(UsageRecord(id=f"w{n:07d}", key_id=key, model="m", replica_id="", prompt_tokens=0,
                                     completion_tokens=0, started_at=at, duration_s=ready - at, status=102))
        reqs.append(UsageRecord(id=f"q{n:07d}", key_id=key, model="m", replica_id=spans[-1].id,
                                prompt_tokens=prompt, completion_tokens=completion, started_at=start, duration_s=dur,
                                status=200))
        last_end = max(last_end, start + dur)
    if spans:
        spans[-1].ended_at = last_end + keep
    return spans, reqs, waits


def charges(asks: list[Ask], load: float, keep: float, gpus: int) -> tuple[dict[str, float], dict[str, float], float]:
    """Each party's GPU-seconds over the whole trace, its busy GPU-seconds, and the GPU time the replicas held."""
    spans, reqs, waits = lifecycle(asks, load, keep, gpus)
    end = max((s.ended_at or 0.0 for s in spans), default=0.0)
    out: dict[str, float] = {}
    busy: dict[str, float] = {}
    a = 0.0
    while a < end + WINDOW:
        b = a + WINDOW
        inside = [r for r in reqs if r.started_at < b and r.started_at + r.duration_s >= a]
        acc = charge_window(a, b, spans, inside, CONFIG, [w for w in waits if w.started_at < b])
        for row in acc.rows:
            out[row.key_id] = out.get(row.key_id, 0.0) + row.gpu_s
            busy[row.key_id] = busy.get(row.key_id, 0.0) + row.busy_s
        spans, a = [s for s in acc.spans if s.ended_at is None or s.ended_at > b], b
    held = sum(gpus * ((s.ended_at or 0.0) - s.created_at) for s in lifecycle(asks, load, keep, gpus)[0])
    return out, busy, held


@st.composite
def honest(draw: st.DrawFn) -> list[Ask]:
    return [("H", draw(st.floats(0, 300)), draw(st.floats(0.01, 20)), draw(st.integers(0, 300)),
             draw(st.integers(0, 300))) for _ in range(draw(st.integers(1, 6)))]


@st.composite
def adversary(draw: st.DrawFn) -> list[Ask]:
    play = draw(st.sampled_from(["ping", "leave", "flood", "pad", "ask_and_leave"]))
    t0 = draw(st.floats(0, 300))
    if play == "ping":  # a tiny request every so often: the model kept warm for whoever used it before
        every = draw(st.floats(5, 100))
        return [("X", t0 + i * every, 0.01, 1, 1) for i in range(draw(st.integers(1, 12)))]
    if play == "leave":  # requests that report no tokens (a client gone before its usage)
        return [("X", draw(st.floats(0, 300)), draw(st.floats(0.01, 30)), 0, 0) for _ in range(draw(st.integers(1, 5)))]
    if play == "flood":  # prompt-heavy requests beside the honest ones
        return [("X", draw(st.floats(0, 300)), draw(st.floats(0.01, 5)), 100_000, 1)
                for _ in range(draw(st.integers(1, 8)))]
    if play == "pad":  # a long request of almost no tokens, held beside the honest ones
        return [("X", t0, draw(st.floats(30, 300)), 0, 1)]
    return [("X", t0, 0.01, 0, 0)]  # asks for the load, leaves at once (its wait is all it does)


@settings(max_examples=examples(300), deadline=None)
@given(honest(), adversary(), st.floats(0, 30), st.sampled_from([20.0, 60.0, 600.0]), st.integers(1, 4))
def test_no_key_pays_past_what_its_own_requests_can_cost(h: list[Ask], x: list[Ask], load: float, keep: float,
                                                         gpus: int) -> None:
    got, busy, held = charges(h + x, load, keep, gpus)
    assert sum(got.values()) == pytest.approx(held, rel=1e-9, abs=1e-6)  # every GPU-second to exactly one party
    for key, own in (("H", h), ("X", x)):
        in_flight = sum(dur for _, _, dur, _, _ in own)
        assert busy.get(key, 0.0) <= gpus * in_flight * (1 + 1e-9) + 1e-6, (key, busy, own)
        bound = gpus * (in_flight + len(own) * (load + keep))
        assert got.get(key, 0.0) <= bound * (1 + 1e-9) + 1e-6, (key, got, bound)
    assert OPERATOR not in got or got[OPERATOR] <= 1e-6  # every load here was asked for: nothing is the operator's


def test_a_long_request_of_one_token_beside_a_short_one_pays_its_own_time() -> None:
    """The replay: 1 s of 100 tokens beside 100 s of one token, on one GPU already loaded."""
    _, busy, _ = charges([("H", 10.0, 1.0, 0, 100), ("X", 10.0, 100.0, 0, 1)], 0.0, 20.0, 1)
    assert busy["H"] == pytest.approx(1.0) and busy["X"] == pytest.approx(99.0)  # H paid 99 of them before
