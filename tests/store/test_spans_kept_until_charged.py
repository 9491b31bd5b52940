"""Retention prunes a replica's span only once its GPU time is charged: a span that ended after chargeback's
mark is still read by the next leader (open_spans), however old its end, or its last windows would go uncharged."""

from __future__ import annotations

from collections.abc import Callable

from llmgw.records.chargeback import ReplicaSpan
from llmgw.store.sql import SqlStore


def test_a_span_ended_after_the_mark_survives_retention(opener: Callable[[], SqlStore]) -> None:
    s = opener()
    done = ReplicaSpan(id="done", model="m", gpus=1, gpu_class="H100", demand=True, created_at=10.0,
                       ended_at=50.0, accounted_to=60.0)
    late = ReplicaSpan(id="late", model="m", gpus=1, gpu_class="H100", demand=True, created_at=10.0,
                       ended_at=500.0, accounted_to=120.0)
    s.put_charges([], [done, late], 0.0, 120.0)
    s.prune(usage_before=1000.0, events_before=0.0)
    assert [sp.id for sp in s.open_spans(s.charge_mark())] == ["late"]
    s.put_charges([], [], 120.0, 600.0)
    s.prune(usage_before=1000.0, events_before=0.0)
    assert s.open_spans(0.0) == []
