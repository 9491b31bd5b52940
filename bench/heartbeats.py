"""Heartbeats at scale: many lightweight simulated agents (a certificate and one kept-alive TLS connection each)
posting realistic reports, open loop, to one or three `llmgw server` processes on SQLite or PostgreSQL; and the
reconcile pass time at 1,000 and 10,000 nodes. Method and figures: docs/benchmarks.md, "Heartbeats".

    .venv/bin/python -m bench.heartbeats --nodes 10000 --interval 5 --seconds 30               # one server, SQLite
    .venv/bin/python -m bench.heartbeats --nodes 10000 --servers 3 --store postgres
    .venv/bin/python -m bench.heartbeats --reconcile                                         # pass times only
    .venv/bin/python -m bench.heartbeats --smoke               # 10 nodes for 1 s, and passes at 100 nodes

Certificates are kept in --workdir between runs: issuing 10,000 takes a while the first time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from tests.harness import free_port

from llmgw.pki.ca import init_ca, issue
from llmgw.pki.tls import client_context

HEARTBEAT = "/v1/agent/heartbeat"
TICK = os.sysconf("SC_CLK_TCK")


def report(i: int, node_id: str) -> bytes:
    """What a node with 8 H100s, two IB adapters and the sim engine reports (no shards: nothing placed)."""
    from llmgw.wire.messages import GPU, EngineStatus, Fabric, Hardware, NodeReport

    gpus = [GPU(index=g, name="NVIDIA H100 80GB HBM3", gpu_class="H100-80G", memory_mib=81559,
                nvlink_peers=[x for x in range(8) if x != g]) for g in range(8)]
    return NodeReport(
        node_id=node_id, address=f"10.{i // 65536}.{i // 256 % 256}.{i % 256}",
        hardware=Hardware(mem_total_bytes=2 * 2**40, gpus=gpus), engines_probed=True,
        engines=[EngineStatus(name="sim", version="1", runs=True)],
        fabrics=[Fabric(name=f"ib-{i // 500}", adapters=["mlx5_0", "mlx5_1"], rate_gbps=400.0)],
    ).model_dump_json().encode()


def certificates(workdir: Path, n: int) -> Path:
    pki = workdir / "pki"
    if not (pki / "ca.crt").exists():
        init_ca(pki)
    if not (pki / "controlplane.crt").exists():
        issue(pki, "controlplane", ips=["127.0.0.1"], server=True)
    t0 = time.monotonic()
    made = 0
    for i in range(n):
        if not (pki / f"n{i:05d}.crt").exists():
            issue(pki, f"n{i:05d}")
            made += 1
    if made:
        print(f"issued {made} node certificates in {time.monotonic() - t0:.0f}s", flush=True)
    return pki



def server_configs(workdir: Path, servers: int, store: dict[str, Any], interval: float) -> list[tuple[Path, int, int]]:
    """(config, agent port, admin port) per server."""
    out = []
    for k in range(servers):
        agent, api, admin = free_port(), free_port(), free_port()
        cfg = {
            "agent_listen": f"127.0.0.1:{agent}", "api_listen": f"127.0.0.1:{api}",
            "admin_listen": f"127.0.0.1:{admin}",
            "tls": {"ca": "pki/ca.crt", "cert": "pki/controlplane.crt", "key": "pki/controlplane.key"},
            "store": store, "admin_token_file": "state/admin.token", "usage_journal_dir": f"state/journal-{k}",
            "heartbeat_interval": f"{interval}s", "node_lost_after": f"{6 * interval}s", "reconcile_interval": "1s",
            "node_networks": ["10.0.0.0/8"],  # the addresses the simulated nodes claim (they all dial from loopback)
            "models": [{"name": "m", "source": "org/m", "engine": "sim", "scaling": {"min": 0, "max": 1}}],
        }
        path = workdir / f"server-{k}.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        out.append((path, agent, admin))
    return out


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def up(admin: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{admin}/health", timeout=2) as r:
            return int(r.status) == 200
    except OSError:
        return False


def generator(nodes: list[int], pki: str, urls: list[str], interval: float, seconds: float, start_at: float,
              out: Any) -> None:
    """One load-generating process: its nodes' heartbeats on schedule; sends (latencies, errors, lateness, cpu)."""
    asyncio.run(_generate(nodes, Path(pki), urls, interval, seconds, start_at, out))


async def _generate(nodes: list[int], pki: Path, urls: list[str], interval: float, seconds: float, start_at: float,
                    out: Any) -> None:
    import aiohttp

    n_all = max(nodes) + 1 if nodes else 1
    lat: list[float] = []
    when: list[float] = []  # seconds into the measurement each answered heartbeat was sent
    late: list[float] = []
    errors: dict[str, int] = {}
    measure_from = start_at + 2 * interval  # two intervals of warm-up: connected, registered, then steady
    end = measure_from + seconds

    async def agent(i: int) -> None:
        nid = f"n{i:05d}"
        ctx = client_context(pki / f"{nid}.crt", pki / f"{nid}.key", pki / "ca.crt")
        body = report(i, nid)
        url = urls[i % len(urls)] + HEARTBEAT
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=1),
                                         timeout=aiohttp.ClientTimeout(total=30)) as s:
            due = start_at + interval * (i % n_all) / max(1, n_all)
            while due < end:
                await asyncio.sleep(max(0.0, due - time.time()))
                t0 = time.time()
                try:
                    async with s.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
                        await r.read()
                        ok = r.status == 200
                        if not ok:
                            errors[str(r.status)] = errors.get(str(r.status), 0) + 1
                except (aiohttp.ClientError, TimeoutError, ssl.SSLError, OSError) as e:
                    ok = False
                    errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
                if measure_from <= t0 < end:
                    late.append(t0 - due)
                    if ok:
                        lat.append(time.time() - t0)
                        when.append(t0 - measure_from)
                due += interval

    cpu0 = time.process_time()
    await asyncio.gather(*(agent(i) for i in nodes))
    out.send((lat, errors, late, time.process_time() - cpu0, when))
    out.close()


def run_heartbeats(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    pki = certificates(workdir, args.nodes)
    shutil.rmtree(workdir / "state", ignore_errors=True)
    (workdir / "state").mkdir()
    pg = None
    if args.store == "postgres":
        from tests.pg import PASSWORD, Postgres

        pg = Postgres().start()
        (workdir / "pg.password").write_text(PASSWORD + "\n")
        store: dict[str, Any] = {"kind": "postgres", "dsn": pg.fresh_db(), "password_file": "pg.password",
                                 "path": "state/llmgw.db"}
    else:
        if args.servers > 1:
            raise SystemExit("several servers need --store postgres (a SQLite file is one server's)")
        store = {"path": "state/llmgw.db"}
    configs = server_configs(workdir, args.servers, store, args.interval)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for k, (path, _, admin) in enumerate(configs):
            with (workdir / f"server-{k}.log").open("wb") as log:
                prof = ["-m", "cProfile", "-o", str(workdir / f"server-{k}.prof")] if args.profile else []
                argv = [sys.executable, *prof, "-m", "llmgw.cli.main", "server", "-c", str(path)]
                procs.append(subprocess.Popen(argv, cwd=workdir, stdout=log, stderr=subprocess.STDOUT,
                                              start_new_session=True))
            deadline = time.monotonic() + 60
            while not up(admin):
                if time.monotonic() > deadline or procs[-1].poll() is not None:
                    raise SystemExit(f"server {k} did not come up: see {workdir / f'server-{k}.log'}")
                time.sleep(0.2)
        urls = [f"https://127.0.0.1:{agent}" for _, agent, _ in configs]
        start_at = time.time() + 2.0
        pipes, gens = [], []
        for g in range(args.generators):
            mine = list(range(g, args.nodes, args.generators))
            recv, send = mp.Pipe(duplex=False)
            gp = mp.Process(target=generator, args=(mine, str(pki), urls, args.interval, args.seconds, start_at, send))
            gp.start()
            pipes.append(recv)
            gens.append(gp)
        measure_from = start_at + 2 * args.interval
        time.sleep(max(0.0, measure_from - time.time()))
        cpu0 = sum(cpu_seconds(p.pid) for p in procs)
        time.sleep(args.seconds)
        cpu1 = sum(cpu_seconds(p.pid) for p in procs)
        rss = [int(next(ln.split()[1] for ln in Path(f"/proc/{p.pid}/status").read_text().splitlines()
                        if ln.startswith("VmRSS:"))) // 1024 for p in procs]
        lat: list[float] = []
        late: list[float] = []
        errors: dict[str, int] = {}
        gen_cpu = 0.0
        windows: dict[int, list[float]] = {}
        for recv in pipes:
            got_lat, got_err, got_late, got_cpu, got_when = recv.recv()
            for w, x in zip(got_when, got_lat, strict=True):
                windows.setdefault(int(w // 5), []).append(x)
            lat += got_lat
            late += got_late
            gen_cpu += got_cpu
            for k2, v in got_err.items():
                errors[k2] = errors.get(k2, 0) + v
        for g_proc in gens:
            g_proc.join(60)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        if pg is not None:
            pg.stop()
    if args.profile:
        import pstats

        for k in range(args.servers):
            print(f"== server {k}, its main thread by cumulative time")
            pstats.Stats(str(workdir / f"server-{k}.prof")).sort_stats("cumulative").print_stats(40)
    lat.sort()
    late.sort()
    rate = len(lat) / args.seconds
    return {
        "nodes": args.nodes, "interval": args.interval, "servers": args.servers, "store": args.store,
        "wanted_per_s": args.nodes / args.interval, "answered_per_s": round(rate, 1),
        "p50_ms": round(1000 * statistics.median(lat), 1) if lat else None,
        "p99_ms": round(1000 * lat[int(0.99 * (len(lat) - 1))], 1) if lat else None,
        "errors": errors,
        "server_cpu_us_per_heartbeat": round(1e6 * (cpu1 - cpu0) / max(1, len(lat))),
        "server_cores": round((cpu1 - cpu0) / args.seconds, 2),
        "generator_cores": round(gen_cpu / (args.seconds + 2 * args.interval + 2), 2),
        "server_rss_mib": rss,
        "late_p99_ms": round(1000 * late[int(0.99 * (len(late) - 1))], 1) if late else None,
        "p99_ms_by_5s": [round(1000 * sorted(v)[int(0.99 * (len(v) - 1))], 1) for _, v in sorted(windows.items())],
    }


def reconcile_times(sizes: tuple[int, ...] = (1_000, 10_000), replicas: int = 1_000, runs: int = 5) -> dict[int, float]:
    """Median reconcile pass, ms, with `replicas` ready replicas over n nodes that report their shards."""
    from bench.placement import NOW, cluster
    from llmgw.config.server import ServerConfig, TLSFiles
    from llmgw.control.plane import ControlPlane
    from llmgw.control.writer import StoreWriter
    from llmgw.core.clock import FakeClock
    from llmgw.core.conditions import ConditionType, Status, set_condition
    from llmgw.core.reasons import Reason
    from llmgw.store.sqlite import SqliteStore
    from llmgw.wire.messages import ShardState

    out = {}
    for n in sizes:
        nodes, reps, specs = cluster(n)
        reps = reps[:replicas]
        spec = specs["other"].model_copy(update={"scaling": specs["other"].scaling.model_copy(
            update={"min": len(reps), "max": len(reps)})})
        ready = set_condition([], ConditionType.Ready, Status.TRUE, Reason.AllShardsReady, "", NOW)
        by_node: dict[str, list[ShardState]] = {}
        for r in reps:
            for a in r.assignments:
                by_node.setdefault(a.node_id, []).append(ShardState(replica_id=r.id, rank=a.rank, state="ready"))
        nodes = [nd.model_copy(update={"lost": False, "report": nd.report.model_copy(
            update={"shards": by_node.get(nd.id, [])})}) for nd in nodes]
        reps = [r.model_copy(update={"conditions": ready, "ready_at": NOW, "seen_ranks": list(range(
            r.shards_expected)), "endpoint": f"http://{r.assignments[0].address}:20000"}) for r in reps]
        with tempfile.TemporaryDirectory() as tmp:
            store = SqliteStore(Path(tmp) / "s.db").open()
            store.put_nodes(nodes)
            for r in reps:
                store.put_replica(r)
            clock = FakeClock(NOW)
            writer = StoreWriter(clock)
            plane = ControlPlane(ServerConfig(tls=TLSFiles(ca="x", cert="x", key="x"), models=[spec]), store, clock,
                                 writer=writer)
            plane.load()
            plane.passes.reconcile_once()  # the first pass settles whatever the made-up cluster needs
            times = []
            for _ in range(runs):
                clock.advance(1.0)
                t0 = time.perf_counter()
                plane.passes.reconcile_once()
                times.append(time.perf_counter() - t0)
            writer.close()
            store.close()
        out[n] = round(1000 * statistics.median(times), 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--interval", type=float, default=5.0)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--servers", type=int, default=1)
    ap.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    ap.add_argument("--generators", type=int, default=2, help="load-generating processes")
    ap.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "llmgw-bench-heartbeats"))
    ap.add_argument("--reconcile", action="store_true", help="only the reconcile pass times")
    ap.add_argument("--profile", action="store_true", help="run the servers under cProfile and print the top")
    ap.add_argument("--json", help="write the results here too")
    ap.add_argument("--smoke", action="store_true", help="10 nodes for 1 s, then passes at 100 nodes: that it runs")
    args = ap.parse_args()
    if args.smoke:
        with tempfile.TemporaryDirectory() as d:
            args.nodes, args.interval, args.seconds, args.generators, args.workdir = 10, 0.5, 1.0, 1, d
            smoke(args)
        return
    results: dict[str, Any] = {}
    if args.reconcile:
        results["reconcile_pass_ms"] = reconcile_times()
        print(f"reconcile pass, 1,000 ready replicas: {results['reconcile_pass_ms']} (ms by node count)")
    else:
        results = run_heartbeats(args)
        print(json.dumps(results, indent=2))
        aim = results["answered_per_s"] >= 0.98 * results["wanted_per_s"] and (results["p99_ms"] or 1e9) < 100
        print(f"{'MET' if aim else 'MISSED'}: {results['answered_per_s']}/s of {results['wanted_per_s']:.0f}/s "
              f"wanted, p99 {results['p99_ms']} ms (aim: all of them, p99 < 100 ms)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


def smoke(args: argparse.Namespace) -> None:
    """Both halves on a few nodes; any heartbeat not answered fails it."""
    results = run_heartbeats(args)
    print(json.dumps(results, indent=2))
    if results["errors"] or not results["answered_per_s"]:
        raise SystemExit(f"heartbeats not answered: {results['errors']}, {results['answered_per_s']}/s answered")
    passes = reconcile_times(sizes=(100,), replicas=20, runs=1)
    print(f"reconcile pass, 20 ready replicas: {passes} (ms by node count)")


if __name__ == "__main__":
    main()
