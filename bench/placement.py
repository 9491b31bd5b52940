"""How long place() takes on simulated clusters of 100, 1,000 and 10,000 nodes, cold (empty per-node caches, as the
first placement of a pass) and warm; snapshot construction timed apart; medians of several runs. The cluster and
the method: docs/benchmarks.md, "Placement".

    .venv/bin/python bench/placement.py            # the table
    .venv/bin/python bench/placement.py --profile  # cProfile of the 10,000-node cases
    .venv/bin/python bench/placement.py --smoke    # 100 to 1,000 nodes, one run each: that it runs
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import itertools
import platform
import pstats
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial

from llmgw.config.server import ModelSpec, Profile, Scaling
from llmgw.core.explanation import explanation_lines
from llmgw.placement.checks import Request
from llmgw.placement.place import Placement, place
from llmgw.placement.snapshot import Snapshot, build_snapshot
from llmgw.records.state import NodeRecord, ReplicaRecord, ShardAssignment
from llmgw.wire.messages import GPU, EngineStatus, Fabric, Hardware, NodeReport

GiB = 2**30
SIZES = (100, 1_000, 10_000)
SOURCE = "/models/bench"
NOW = 1_800_000_000.0


def _gpus(rng: random.Random) -> list[GPU]:
    topo = rng.random()
    faulty = {rng.randrange(8)} if rng.random() < 0.03 else set()
    out = []
    for i in range(8):
        if topo < 0.8:
            peers: list[int] | None = [j for j in range(8) if j != i]  # SXM with NVSwitch
        elif topo < 0.9:
            peers = [i ^ 1]  # PCIe with bridged pairs
        else:
            peers = None  # no NVML: unknown
        out.append(GPU(index=i, name="NVIDIA H100 80GB HBM3", gpu_class="H100-80G", memory_mib=81559,
                       faulty=i in faulty, fault="Xid 79: GPU has fallen off the bus" if i in faulty else "",
                       nvlink_peers=peers))
    return out


def cluster(n: int, seed: int = 1) -> tuple[list[NodeRecord], list[ReplicaRecord], dict[str, ModelSpec]]:
    rng = random.Random(seed)
    fabrics = max(2, n // 500)  # several fabrics, a few hundred nodes each at scale
    nodes: list[NodeRecord] = []
    for i in range(n):
        nid = f"node{i:05d}"
        fab = [] if rng.random() < 0.05 else [f"ib-{i * fabrics // n}"]
        report = NodeReport(
            node_id=nid, address=f"10.{i // 65536}.{i // 256 % 256}.{i % 256}",
            hardware=Hardware(mem_total_bytes=1024 * GiB, gpus=_gpus(rng)),
            engines_probed=True, engines=[EngineStatus(name="sim", version="1", runs=True)],
            fabrics=[Fabric(name=f, adapters=["mlx5_0", "mlx5_1"], rate_gbps=400.0) for f in fab],
            weights=[SOURCE] if rng.random() < 0.1 else [],
        )
        lost = rng.random() < 0.01
        nodes.append(NodeRecord(id=nid, report=report, first_seen=0.0, last_seen=NOW, lost=lost))
    other = ModelSpec(name="other", source="/models/other", engine="sim",
                      profile=Profile(gpus_per_shard=2, memory=32 * GiB), scaling=Scaling(min=1, max=n))
    replicas: list[ReplicaRecord] = []
    order = list(range(n))
    rng.shuffle(order)
    # 10% held whole by two-node replicas (pairs of neighbours, usually on one fabric)
    held = set()
    for i in order[: n // 10]:
        j = i + 1 if i + 1 < n else i - 1
        if i in held or j in held:
            continue
        held |= {i, j}
        assigns = [ShardAssignment(rank=r, node_id=nodes[k].id, address=nodes[k].report.address,
                                   gpus=list(range(8)), serve_port=20000 if r == 0 else None,
                                   rendezvous_port=20001 if r == 0 else None) for r, k in enumerate((i, j))]
        replicas.append(ReplicaRecord(id=f"wide-{i}", model="other", created_at=0.0, shards_expected=2,
                                      assignments=assigns))
    # 30% run one or two single-node replicas on some of their cards
    for i in order[n // 10 : n // 10 + n * 3 // 10]:
        if i in held:
            continue
        start = 0
        for k in range(rng.choice((1, 1, 2))):
            width = rng.choice((1, 2, 4))
            if start + width > 8:
                break
            replicas.append(ReplicaRecord(
                id=f"r-{i}-{k}", model="other", created_at=0.0, shards_expected=1,
                assignments=[ShardAssignment(rank=0, node_id=nodes[i].id, address=nodes[i].report.address,
                                             gpus=list(range(start, start + width)), serve_port=20000 + k)],
            ))
            start += width
    return nodes, replicas, {"other": other}


def request(gpus: int, nodes: int) -> Request:
    m = ModelSpec(name=f"bench-{nodes}x{gpus}", source=SOURCE, engine="sim",
                  profile=Profile(gpus_per_shard=gpus, nodes=nodes, gpu_class="H100-80G", memory=64 * GiB),
                  scaling=Scaling(min=1, max=1))
    return Request("bench", m)


REQUESTS = [("1 GPU", request(1, 1)), ("2 GPU", request(2, 1)), ("4 GPU", request(4, 1)), ("8 GPU", request(8, 1)),
            ("2 nodes x 8", request(8, 2)), ("4 nodes x 8", request(8, 4))]


def cold(snap: Snapshot) -> Snapshot:
    """The same snapshot with every per-node cache empty, as a new reconcile pass starts."""
    return Snapshot(nodes=tuple(replace(n, _free_cache={}) for n in snap.nodes), now=snap.now)


def timed(fn: Callable[[], object]) -> float:
    """Milliseconds for one call, with the cyclic GC paused as timeit does: a full collection over a
    10,000-node cluster's objects costs more than the placement, and lands on whichever call triggers it."""
    gc.collect()
    gc.disable()
    try:
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1000
    finally:
        gc.enable()


def bench(runs: dict[int, int]) -> tuple[dict[tuple[int, str], tuple[float, float]], dict[int, float]]:
    results: dict[tuple[int, str], tuple[float, float]] = {}
    builds: dict[int, float] = {}
    for n in runs:
        nodes, replicas, models = cluster(n)
        models = {**models, **{r.model.name: r.model for _, r in REQUESTS}}
        build = partial(build_snapshot, nodes, replicas, models, NOW)
        builds[n] = statistics.median(timed(build) for _ in range(runs[n]))
        snap = build()
        print(f"{n:>6} nodes: {len(replicas)} replicas; snapshot build {builds[n]:.1f} ms", flush=True)
        for name, req in REQUESTS:
            res = place(req, snap)
            assert isinstance(res, Placement), f"{n} nodes, {name}: {explanation_lines(res.explanation)}"
            c, w = [], []
            for _ in range(runs[n]):
                fresh = cold(snap)
                c.append(timed(partial(place, req, fresh)))
                w.append(timed(partial(place, req, fresh)))
            results[(n, name)] = (statistics.median(c), statistics.median(w))
    return results, builds


def table(results: dict[tuple[int, str], tuple[float, float]], builds: dict[int, float]) -> str:
    sizes = sorted(builds)
    steps = list(itertools.pairwise(sizes))  # each size against the one before: how time grows
    head = ("| request | " + " | ".join(f"{n:,} nodes: cold / warm ms" for n in sizes) + " | "
            + " | ".join(f"{hi:,}/{lo:,}" for lo, hi in steps) + " |")
    lines = [head, "|" + "---|" * (len(sizes) + len(steps) + 1)]
    for name, _ in REQUESTS:
        cells = [f"{results[(n, name)][0]:.2f} / {results[(n, name)][1]:.2f}" for n in sizes]
        grew = [f"{results[(hi, name)][0] / results[(lo, name)][0]:.1f}x" for lo, hi in steps]
        lines.append(f"| {name} | " + " | ".join(cells + grew) + " |")
    cells = [f"{builds[n]:.1f}" for n in sizes] + [f"{builds[hi] / builds[lo]:.1f}x" for lo, hi in steps]
    lines.append("| (snapshot build) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def profile() -> None:
    nodes, replicas, models = cluster(10_000)
    models = {**models, **{r.model.name: r.model for _, r in REQUESTS}}
    snap = build_snapshot(nodes, replicas, models, NOW)
    prof = cProfile.Profile()
    for _, req in REQUESTS:
        fresh = cold(snap)
        prof.enable()
        place(req, fresh)
        prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(20)
    print(out.getvalue())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--quick", action="store_true", help="fewer runs")
    ap.add_argument("--smoke", action="store_true", help="100 to 1,000 nodes, one run each: that it runs")
    args = ap.parse_args()
    if args.profile:
        profile()
        return
    runs = dict(zip(SIZES, (21, 11, 7) if not args.quick else (5, 3, 3), strict=True))
    if args.smoke:
        runs = {100: 1, 300: 1, 1_000: 1}
    started = time.perf_counter()
    print(f"python {platform.python_version()} on {platform.machine()}, median of {runs} runs per cell")
    results, builds = bench(runs)
    print()
    print(table(results, builds))
    print(f"\ntotal {time.perf_counter() - started:.0f}s")


if __name__ == "__main__":
    main()
