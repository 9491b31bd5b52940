"""What a dashboard view (/admin/view) and a scrape (/metrics) cost at 10,000 nodes and a million usage rows: real
HTTP on loopback to the real management API in a process of its own, CPU per request from /proc, baselines in the
same run. Method and figures: docs/benchmarks.md, "Dashboard and scrape".

    .venv/bin/python -m bench.dashboard                # the table, against the aim of 50 ms each
    .venv/bin/python -m bench.dashboard --rows 100000  # smaller, quicker
    .venv/bin/python -m bench.dashboard --smoke        # 20 nodes, 2,000 rows, 3 requests each: that it runs
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
from aiohttp import web
from prometheus_client import generate_latest

from bench.placement import NOW, cluster
from llmgw.config.server import ServerConfig, TLSFiles
from llmgw.control.http.admin_api import admin_app
from llmgw.control.http.admin_auth import allowed_hosts
from llmgw.control.plane import ControlPlane
from llmgw.control.server import open_plane
from llmgw.control.tenants.usage_totals import DAY
from llmgw.control.views.metrics import registry
from llmgw.control.views.status import summary_of
from llmgw.control.views.summary import Demand, summarize
from llmgw.core.clock import FakeClock
from llmgw.reconcile.node_status import node_conditions
from llmgw.store.base import HOUR, UsageRecord
from llmgw.store.sql import USAGE_COLUMNS
from llmgw.store.sqlite import SqliteStore
from llmgw.wire.messages import EngineLoad, ShardState

TOKEN = "bench-token-0123456789"
RUNS = 15
AIM_MS = 50  # each of the view and the scrape, at 10,000 nodes and a million usage rows
PATHS = ["/admin/view", "/metrics", "/api/status"]


def usage_rows(rows: int, seed: int = 2) -> Iterator[tuple[object, ...]]:
    """The usage table's rows (USAGE_COLUMNS): 100 keys over 4 models across 90 days."""
    rng = random.Random(seed)
    keys = [f"key{i:03d}" for i in range(100)]
    models = ["other", "m1", "m2", "m3"]
    for i in range(rows):
        yield (f"u{i:012d}", rng.choice(keys), rng.choice(models), "r", rng.randrange(4000), rng.randrange(800),
               NOW - rng.random() * 90 * DAY, 1.0, 200)


def fill_usage(db: Path, rows: int) -> None:
    """A million rows in seconds: one executemany into the usage table, then its running totals and hourly sums
    made from the rows by a GROUP BY each (what the store keeps as it takes records, as its migrations made them
    from rows already there). `same_as_the_store` checks the two ways agree."""
    with sqlite3.connect(db) as conn:
        conn.executemany(f"INSERT INTO usage ({', '.join(USAGE_COLUMNS)}) VALUES "
                         f"({', '.join('?' * len(USAGE_COLUMNS))})", usage_rows(rows))
        conn.execute("DELETE FROM usage_totals")
        conn.execute("INSERT INTO usage_totals SELECT key_id, model, COUNT(*), SUM(prompt_tokens), "
                     "SUM(completion_tokens), MAX(started_at) FROM usage GROUP BY key_id, model")
        conn.execute("DELETE FROM usage_hourly")
        conn.execute(f"INSERT INTO usage_hourly SELECT key_id, model, CAST(started_at / {HOUR} AS INTEGER), "
                     "COUNT(*), SUM(prompt_tokens), SUM(completion_tokens), MAX(started_at) FROM usage "
                     f"GROUP BY key_id, model, CAST(started_at / {HOUR} AS INTEGER)")
    conn.close()


def same_as_the_store(d: Path, rows: int) -> None:
    """The bulk-built usage reads as the store's own add_usage would have left it: its running totals and its
    hourly sums."""
    bulk, one_by_one = d / "bulk.db", d / "store.db"
    SqliteStore(bulk).open().close()
    fill_usage(bulk, rows)
    store = SqliteStore(one_by_one).open()
    store.add_usage([UsageRecord(id=str(r[0]), key_id=str(r[1]), model=str(r[2]), replica_id=str(r[3]),
                                 prompt_tokens=int(str(r[4])), completion_tokens=int(str(r[5])),
                                 started_at=float(str(r[6])), duration_s=1.0, status=200) for r in usage_rows(rows)])
    built = SqliteStore(bulk).open()
    try:
        for what, a, b in (("totals", built.usage_totals(), store.usage_totals()),
                           ("hourly sums", built.usage_by_hour(NOW - 100 * DAY), store.usage_by_hour(NOW - 100 * DAY))):
            if a != b:
                raise SystemExit(f"the bulk-built usage's {what} differ from the store's own: {a[:2]} {b[:2]}")
    finally:
        built.close()
        store.close()


def build(db: Path, n_nodes: int, rows: int) -> ServerConfig:
    """The store a control plane will load: nodes with their conditions and engines' gauges, replicas, usage."""
    nodes, replicas, models = cluster(n_nodes)
    SqliteStore(db).open().close()  # the schema
    if rows:
        fill_usage(db, rows)
    store = SqliteStore(db).open()
    load = EngineLoad(running=3, waiting=1, kv_cache_usage=0.4, at=NOW)
    shards: dict[str, list[ShardState]] = {}
    for r in replicas:
        for a in r.assignments:
            shards.setdefault(a.node_id, []).append(ShardState(replica_id=r.id, rank=a.rank, state="ready",
                                                               load=load if a.rank == 0 else None))
    records = []
    for n in nodes:
        report = n.report.model_copy(update={"shards": shards.get(n.id, [])})
        conds = node_conditions([], report, lost=n.lost, revoked="", now=NOW)
        records.append(n.model_copy(update={"report": report, "conditions": conds}))
    store.put_nodes(records)  # one transaction: 10,000 commits of one node each took minutes
    for r in replicas:
        store.put_replica(r)
    store.close()
    return ServerConfig(tls=TLSFiles(ca="x", cert="x", key="x"), models=list(models.values()))


def loaded(db: Path, cfg: ServerConfig) -> ControlPlane:
    plane = open_plane(cfg, SqliteStore(db).open(), FakeClock(start=NOW))
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
    from bench.addresses import free_port

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
    status = plane.status()
    s = asyncio.run(summary_of(status))  # derives each node's facts once: the runs below read them kept
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
                  recent=plane.store.usage_totals(NOW - DAY), facts=status.node_facts)
        scan.append((time.perf_counter() - t0) * 1000)
    plane.writer.close()
    return statistics.median(lib), statistics.median(scan)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=RUNS, help="requests per path")
    ap.add_argument("--smoke", action="store_true", help="20 nodes, 2,000 rows, 3 requests each: that it runs")
    args = ap.parse_args()
    if args.smoke:
        args.nodes, args.rows, args.runs = 20, 2_000, 3
    with tempfile.TemporaryDirectory() as d:
        if args.smoke:
            same_as_the_store(Path(d), args.rows)
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
    for p in ("/admin/view", "/metrics"):
        med = statistics.median(res[p])
        print(f"{'MET' if med < AIM_MS else 'MISSED'}: {p} median {med:.1f} ms at {args.nodes:,} nodes and "
              f"{args.rows:,} usage rows (aim: under {AIM_MS} ms)")


if __name__ == "__main__":
    main()
