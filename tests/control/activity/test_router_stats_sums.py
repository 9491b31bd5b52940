"""What the control plane sums of router workers' cumulative reports, and what they render as."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from llmgw.api.router import ActivityReport
from llmgw.api.stats import ModelStats, RouterStats
from llmgw.control.activity.activity import REPORTER_SILENT_AFTER
from llmgw.control.views.exposition import render
from llmgw.control.views.metrics import registry
from llmgw.control.views.summary import summarize
from llmgw.core.clock import FakeClock
from tests.harness import plane_in


def cumulative(n: int) -> RouterStats:
    return RouterStats(models={"m": ModelStats(requests={"200": n}, completion_tokens=10 * n)})


def test_a_worker_idle_for_30s_and_then_busy_again_is_not_counted_twice(tmp_path: Path) -> None:
    """RemoteState.flush sends nothing while a worker has nothing new (no demand, no use, nothing in flight, the
    recorder's version unchanged), so an idle worker is 'silent'. request_stats() retires it (adds its cumulative
    counts to _retired_stats); when it serves again its next report is cumulative too, so the old counts are in
    both. Fails today: 5 requests, then 1 more, read as 11."""
    p = plane_in(tmp_path)
    assert isinstance(p.clock, FakeClock)
    p.activity.record_activity(ActivityReport(reporter="worker-7", stats=cumulative(5)))
    assert p.activity.request_stats().models["m"].requests == {"200": 5}
    p.clock.advance(REPORTER_SILENT_AFTER + 1)  # idle: the worker had nothing to say (a scrape happens meanwhile)
    assert p.activity.request_stats().models["m"].requests == {"200": 5}
    p.activity.record_activity(ActivityReport(reporter="worker-7", stats=cumulative(6)))  # one more: cumulative 6
    total = p.activity.request_stats()
    assert total.models["m"].requests == {"200": 6}, total.models["m"].requests
    assert total.models["m"].completion_tokens == 60


def _rendered(stats: RouterStats) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    s = summarize([], [], [], {}, 0.0, requests=stats)
    out = {}
    for fam in text_string_to_metric_families(render(registry(lambda: s)).decode()):
        for x in fam.samples:
            out[(x.name, frozenset(x.labels.items()))] = x.value
    return out


def test_a_histogram_with_more_counts_than_buckets_is_refused() -> None:
    """Histogram.counts took up to 32 entries whatever the kind (e2e has 13 bounds + Inf = 14) and the exporter
    zipped them with strict=False: the entries past +Inf were dropped from the buckets and _count while _sum kept
    them (32 observations reported, _count 14). A report like that is refused now, whole."""
    body = ('{"reporter": "worker-1", "stats": {"models": {"m": {"e2e": {"counts": ' + str([1] * 32)
            + ', "sum": 32.0}}}}}')
    with pytest.raises(ValidationError, match="e2e: 32 bucket counts, not 14"):
        ActivityReport.model_validate_json(body)
    right = body.replace(str([1] * 32), str([1] * 14))
    act = ActivityReport.model_validate_json(right)
    assert act.stats is not None
    out = _rendered(act.stats)
    count = out[("llmgw_request_duration_seconds_count", frozenset({("model", "m")}))]
    inf = out[("llmgw_request_duration_seconds_bucket", frozenset({("model", "m"), ("le", "+Inf")}))]
    assert count == inf == 14


def test_a_histogram_with_fewer_counts_than_buckets_is_refused() -> None:
    """Three counts for ttft were exported as three buckets and no +Inf bucket (which histogram_quantile needs)."""
    with pytest.raises(ValidationError, match="ttft: 3 bucket counts"):
        RouterStats.model_validate_json('{"models": {"m": {"ttft": {"counts": [1, 1, 1], "sum": 0.1}}}}')
    assert ("llmgw_time_to_first_token_seconds_bucket", frozenset({("model", "m"), ("le", "+Inf")})) in _rendered(
        RouterStats(models={"m": ModelStats()}))  # nothing observed: every bucket, +Inf included, at zero
