"""What a dashboard view (/admin/view) and a scrape (/metrics) cost at 1,000 nodes and a million usage rows.

    .venv/bin/python bench/dashboard.py               # the table (building the million rows takes a minute)
    .venv/bin/python bench/dashboard.py --rows 100000 # smaller, quicker

Both are real HTTP requests on loopback to the real management API (the operator token, the guard, the Summary,
the store's reads off the event loop, the renderer). The cluster is bench/placement.py's (8 GPUs per node, several
fabrics, replicas single- and multi-node, some faults, some lost nodes) with engine gauges on every replica; the
usage table holds `--rows` requests of 100 keys over 4 models across 90 days, and the hourly aggregate that goes
with them. Baselines, measured in the same run: the same requests at 10 nodes with no usage; and the same view
with "the last day" computed the way a table scan would (usage_totals(since), what the aggregate replaces).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web

from bench.placement import NOW, cluster
from llmgw.config.server import ServerConfig, TLSFiles
from llmgw.control.admin_api import admin_app
from llmgw.control.admin_auth import allowed_hosts
from llmgw.control.plane import ControlPlane
from llmgw.control.summary import DAY, Demand, summarize
from llmgw.core.clock import FakeClock
from llmgw.store.base import UsageRecord
from llmgw.store.sqlite import SqliteStore
from llmgw.wire.messages import EngineLoad, ShardState

TOKEN = "bench-token-0123456789"
RUNS = 15


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


def plane_for(n_nodes: int, rows: int, tmp: Path) -> ControlPlane:
    nodes, replicas, models = cluster(n_nodes)
    store = SqliteStore(tmp / f"bench-{n_nodes}-{rows}.db").open()
    if rows:
        fill_usage(store, rows)
    cfg = ServerConfig(tls=TLSFiles(ca="x", cert="x", key="x"), models=list(models.values()))
    clock = FakeClock(start=NOW)
    plane = ControlPlane(cfg, store, clock)
    plane.load()
    load = EngineLoad(running=3, waiting=1, kv_cache_usage=0.4, at=NOW)
    shards: dict[str, list[ShardState]] = {}
    for r in replicas:
        for a in r.assignments:
            shards.setdefault(a.node_id, []).append(ShardState(replica_id=r.id, rank=a.rank, state="ready",
                                                               load=load if a.rank == 0 else None))
    for n in nodes:
        n = n.model_copy(update={"report": n.report.model_copy(update={"shards": shards.get(n.id, [])})})
        store.put_node(n)
    for r in replicas:
        store.put_replica(r)
    plane = ControlPlane(cfg, store, clock)
    plane.load()
    plane.reconcile_once()  # the first pass: /metrics answers from now on
    return plane


async def timed_gets(url: str, paths: list[str]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {p: [] for p in paths}
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession(headers=auth) as s:
        for _ in range(RUNS):
            for p in paths:
                t0 = time.perf_counter()
                async with s.get(url + p) as r:
                    body = await r.read()
                    assert r.status == 200, (p, r.status, body[:200])
                out[p].append((time.perf_counter() - t0) * 1000)
    return out


async def measure(plane: ControlPlane) -> dict[str, list[float]]:
    app = admin_app(plane, TOKEN, allowed_hosts("127.0.0.1", []))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        return await timed_gets(f"http://127.0.0.1:{port}", ["/admin/view", "/metrics", "/api/status"])
    finally:
        await runner.cleanup()


def scan_summary_ms(plane: ControlPlane) -> list[float]:
    """The view's summary with the last day read by scanning the usage table: what the hourly aggregate avoids."""
    out = []
    for _ in range(5):
        t0 = time.perf_counter()
        store = plane.store
        recent = store.usage_totals(NOW - DAY)
        summarize(list(plane.nodes.values()), list(plane.replicas.values()), store.usage_totals(), plane.last_used,
                  NOW, models=plane.models, demand=Demand(), recent=recent)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--nodes", type=int, default=1_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        t0 = time.perf_counter()
        big = plane_for(args.nodes, args.rows, tmp)
        built = time.perf_counter() - t0
        small = plane_for(10, 0, tmp)
        base = asyncio.run(measure(small))
        res = asyncio.run(measure(big))
        scan = scan_summary_ms(big)
    print(f"{args.nodes} nodes, {len(big.replicas)} replicas, {args.rows:,} usage rows (built in {built:.0f} s); "
          f"median of {RUNS} requests each, milliseconds")
    print(f"{'request':<14}{'median':>9}{'p90':>9}{'10 nodes, no usage':>21}{'ratio':>8}")
    for p, ms in res.items():
        med, p90 = statistics.median(ms), sorted(ms)[int(0.9 * (len(ms) - 1))]
        b = statistics.median(base[p])
        print(f"{p:<14}{med:>9.1f}{p90:>9.1f}{b:>21.1f}{med / b:>8.1f}")
    print(f"summary with the last day by a table scan (what the hourly aggregate replaces): "
          f"{statistics.median(scan):.0f} ms")


if __name__ == "__main__":
    main()
