"""What every router process measured, summed by the control plane: a worker that stops reporting keeps its counts
(counters never go back) but not its requests in flight. And /metrics is 503 until the first reconcile pass."""

from __future__ import annotations

from pathlib import Path

from llmgw.api.router import ActivityReport
from llmgw.api.stats import InFlight, ModelStats, RouterStats
from llmgw.control.activity.activity import REPORTER_SILENT_AFTER
from llmgw.core.clock import FakeClock
from llmgw.router.stats import Measure, Recorder
from tests.harness import free_port, plane_in


def worker_stats(n: int) -> RouterStats:
    return RouterStats(models={"m": ModelStats(requests={"200": n}, completion_tokens=10 * n)},
                       in_flight=[InFlight(key_id="k", model="m", n=1)])


def test_the_plane_sums_its_own_router_and_every_worker(tmp_path: Path) -> None:
    p = plane_in(tmp_path)
    local = Recorder()
    p.activity.attach_router(local.snapshot)
    local.finish(Measure(start=0.0, model="m", key_id="k"), 200, 1.0)
    p.activity.record_activity(ActivityReport(reporter="worker-1", stats=worker_stats(3)))
    p.activity.record_activity(ActivityReport(reporter="worker-2", stats=worker_stats(2)))
    p.activity.record_activity(ActivityReport(reporter="worker-2", stats=worker_stats(4)))  # cumulative: its last goes
    total = p.activity.request_stats()
    assert total.models["m"].requests == {"200": 1 + 3 + 4}
    assert total.models["m"].completion_tokens == 70
    assert [(f.key_id, f.n) for f in total.in_flight] == [("k", 2)]
    assert isinstance(p.clock, FakeClock)
    p.clock.advance(REPORTER_SILENT_AFTER + 1)  # both workers gone
    for _ in range(2):  # retired once, counted on every later read
        total = p.activity.request_stats()
        assert total.models["m"].requests == {"200": 8}
        assert total.in_flight == []


async def test_metrics_answer_503_until_the_first_pass(tmp_path: Path) -> None:
    """Before the first reconcile pass every number would be a guess: /metrics says so, never an empty page."""
    import aiohttp
    from aiohttp import web

    from llmgw.control.http.admin_api import metrics_routes

    p = plane_in(tmp_path)
    app = web.Application()
    app.add_routes(metrics_routes(p.status(), p.gauges, p.health))
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(f"http://127.0.0.1:{port}/metrics") as r:
                assert r.status == 503 and "first reconcile pass" in await r.text()
            async with s.get(f"http://127.0.0.1:{port}/health") as r:
                assert r.status == 200 and (await r.json())["status"] == "ok"  # alive before the first pass too
            p.passes.reconcile_once()
            async with s.get(f"http://127.0.0.1:{port}/metrics") as r:
                assert r.status == 200 and "llmgw_nodes" in await r.text()
    finally:
        await runner.cleanup()


def test_loads_and_stops_are_counted_with_their_reason(tmp_path: Path) -> None:
    """A request for an on-demand model starts a replica (a load); once unused past its idle timeout it stops, and
    the stop is counted with the reason the reconciler gave (the metrics' scale events and evictions)."""
    p = plane_in(tmp_path)
    assert isinstance(p.clock, FakeClock)
    p.activity.want("m")
    p.passes.reconcile_once()
    assert p.registry.replica_counts == {("m", "start", "demand"): 1}
    p.passes.reconcile_once()  # the same replica, updated: not a second start
    assert p.registry.replica_counts == {("m", "start", "demand"): 1}
    p.clock.advance(p.timings.demand_window + p.registry.models["m"].scaling.stop_unused_after + 1)
    p.passes.reconcile_once()
    assert p.registry.replica_counts[("m", "stop", "Idle")] == 1
