"""What a dashboard view (/admin/view) and a scrape (/metrics) cost at 1,000 nodes and a million usage rows: real
HTTP on loopback to the real management API in a process of its own, CPU per request from /proc, baselines in the
same run. Method and figures: docs/benchmarks.md, "Dashboard and scrape".

    .venv/bin/python -m bench.dashboard                # the table (building the million rows takes a minute)
    .venv/bin/python -m bench.dashboard --rows 100000  # smaller, quicker
    .venv/bin/python -m bench.dashboard --smoke        # 20 nodes, 2,000 rows, 3 requests each: that it runs
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web
from prometheus_client import generate_latest

from bench.placement import NOW, cluster
from llmgw.config.server import ServerConfig, TLSFiles
from llmgw.control.admin_api import admin_app
from llmgw.control.admin_auth import allowed_hosts
from llmgw.control.metrics import registry
from llmgw.control.plane import ControlPlane
from llmgw.control.status import summary_of
from llmgw.control.summary import DAY, Demand, summarize
from llmgw.core.clock import FakeClock
from llmgw.reconcile.node_status import node_conditions
from llmgw.store.base import UsageRecord
from llmgw.store.sqlite import SqliteStore
from llmgw.wire.messages import EngineLoad, ShardState

TOKEN = "bench-token-0123456789"
RUNS = 15
PATHS = ["/admin/view", "/metrics", "/api/status"]


def fill_usage(store: SqliteStore, rows: int, seed: int = 2) -> None:
    rng = random.Random(seed)
    keys = [f"key{i:03d}" for i in range(100)]
    models = ["other", "m1", "m2", "m3"]
    batch: list[UsageRecord] = []
    for i in range(rows):
        batch.append(UsageRecord(id=f"u{i:012d}", key_id=rng.choice(keys), model=rng.choice(models),
                                 replica_id="r", prompt_tokens=rng.randrange(4000),
                                 completion_tokens=rng.randrange(800),
                                 started_at=NOW - rng.random() * 90 * DAY, duration_s=1.0, status=200))
        if len(batch) == 5000:
            store.add_usage(batch)
            batch = []
    if batch:
        store.add_usage(batch)


def build(db: Path, n_nodes: int, rows: int) -> ServerConfig:
    """The store a control plane will load: nodes with their conditions and engines' gauges, replicas, usage."""
    nodes, replicas, models = cluster(n_nodes)
    store = SqliteStore(db).open()
    if rows:
        fill_usage(store, rows)
    load = EngineLoad(running=3, waiting=1, kv_cache_usage=0.4, at=NOW)
    shards: dict[str, list[ShardState]] = {}
    for r in replicas:
        for a in r.assignments:
            shards.setdefault(a.node_id, []).append(ShardState(replica_id=r.id, rank=a.rank, state="ready",
                                                               load=load if a.rank == 0 else None))
    for n in nodes:
        report = n.report.model_copy(update={"shards": shards.get(n.id, [])})
        conds = node_conditions([], report, lost=n.lost, revoked="", now=NOW)
        store.put_node(n.model_copy(update={"report": report, "conditions": conds}))
    for r in replicas:
        store.put_replica(r)
    store.close()
    return ServerConfig(tls=TLSFiles(ca="x", cert="x", key="x"), models=list(models.values()))


def loaded(db: Path, cfg: ServerConfig) -> ControlPlane:
    plane = ControlPlane(cfg, SqliteStore(db).open(), FakeClock(start=NOW))
    plane.load()
    plane.passes.reconcile_once()  # the first pass: /metrics answers from now on
    return plane


def serve(db: Path, cfg: ServerConfig, port: int, ready: multiprocessing.synchronize.Event) -> None:
    async def run() -> None:
        plane = loaded(db, cfg)
        app = admin_app(plane.status(), plane.limit_counters, plane.gauges, plane.health, TOKEN,
                        allowed_hosts("127.0.0.1", []))
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        ready.set()
        await asyncio.Event().wait()

    asyncio.run(run())


def cpu_ms(pid: int) -> float:
    """The process's CPU time so far (user + system), from /proc: steadier than wall time on a shared machine."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


async def timed_gets(url: str, pid: int, runs: int) -> tuple[dict[str, list[float]], dict[str, int], dict[str, float]]:
    out: dict[str, list[float]] = {p: [] for p in PATHS}
    size: dict[str, int] = {}
    cpu: dict[str, float] = {}
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as s:
        for p in PATHS:
            async with s.get(url + p) as r:  # a first request: the node facts are derived once per record
                await r.read()
            c0 = cpu_ms(pid)
            for _ in range(runs):
                t0 = time.perf_counter()
                async with s.get(url + p) as r:
                    body = await r.read()
                    assert r.status == 200, (p, r.status, body[:200])
                out[p].append((time.perf_counter() - t0) * 1000)
                size[p] = len(body)
            cpu[p] = (cpu_ms(pid) - c0) / runs
    return out, size, cpu


def measure(db: Path, cfg: ServerConfig, runs: int) -> tuple[dict[str, list[float]], dict[str, int], dict[str, float]]:
    from tests.harness import free_port

    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    port = free_port()
    proc = ctx.Process(target=serve, args=(db, cfg, port, ready), daemon=True)
    proc.start()
    try:
        if not ready.wait(600):
            raise SystemExit("the bench server did not start")
        assert proc.pid is not None
        return asyncio.run(timed_gets(f"http://127.0.0.1:{port}", proc.pid, runs))
    finally:
        proc.kill()
        proc.join()


def in_process(db: Path, cfg: ServerConfig) -> tuple[float, float]:
    """(the library's writer, the view's summary with the last day by a table scan), ms, medians of 5."""
    plane = loaded(db, cfg)
    s = asyncio.run(summary_of(plane.status()))
    reg = registry(lambda: s, plane.gauges, lambda: plane.registry.replica_counts)
    lib, scan = [], []
    for _ in range(5):
        t0 = time.perf_counter()
        generate_latest(reg)
        lib.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        held = plane.registry
        summarize(list(held.nodes.values()), list(held.replicas.values()), plane.store.usage_totals(),
                  plane.activity.last_used, NOW, models=plane.registry.models, demand=Demand(),
                  recent=plane.store.usage_totals(NOW - DAY), facts=plane.registry.node_facts)
        scan.append((time.perf_counter() - t0) * 1000)
    return statistics.median(lib), statistics.median(scan)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--nodes", type=int, default=1_000)
    ap.add_argument("--runs", type=int, default=RUNS, help="requests per path")
    ap.add_argument("--smoke", action="store_true", help="20 nodes, 2,000 rows, 3 requests each: that it runs")
    args = ap.parse_args()
    if args.smoke:
        args.nodes, args.rows, args.runs = 20, 2_000, 3
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        big_db, small_db = Path(d) / "big.db", Path(d) / "small.db"
        big = build(big_db, args.nodes, args.rows)
        built = time.perf_counter() - t0
        small = build(small_db, 10, 0)
        base, _, base_cpu = measure(small_db, small, args.runs)
        res, size, cpu = measure(big_db, big, args.runs)
        lib, scan = in_process(big_db, big)
    print(f"{args.nodes} nodes, {args.rows:,} usage rows (built in {built:.0f} s); median and p90 of {args.runs} "
          f"requests each, milliseconds, served by a process of its own")
    print(f"{'request':<14}{'median':>9}{'p90':>9}{'CPU':>7}{'10 nodes, no usage':>21}{'ratio':>8}{'bytes':>11}")
    for p, ms in res.items():
        med, p90 = statistics.median(ms), sorted(ms)[int(0.9 * (len(ms) - 1))]
        b = statistics.median(base[p])
        print(f"{p:<14}{med:>9.1f}{p90:>9.1f}{cpu[p]:>7.1f}{b:>12.1f} ({base_cpu[p]:.1f} CPU){med / b:>8.1f}"
              f"{size[p]:>11,}")
    print(f"the same scrape's text by prometheus_client's generate_latest, in process: {lib:.0f} ms")
    print(f"the view's summary with the last day by a scan of the usage table, in process: {scan:.0f} ms")


if __name__ == "__main__":
    main()
