"""Chargeback's error on the sim: keys sending known amounts of work to one model (a sim engine generating a known
number of tokens per second), each key's share of the busy GPU-seconds charged against its share of the tokens it
asked for; one after the other, then all at once. Method and figures: docs/tenants.md, "Chargeback: how GPU time
is attributed".

    .venv/bin/python -m bench.chargeback             # 3 keys, 4 rounds, 20 tokens/s: about a minute
    .venv/bin/python -m bench.chargeback --smoke     # 1 round, faster tokens: that it runs

Then Chargeback's own cost (`charge_window()`, off the request path): one 60 s window of 60,000 requests on 50
replicas of 8 GPUs (6,000 in the smoke mode), against a sort of the same records by start in the same run.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from bench.addresses import engine_ports, free_port
from bench.coldstart import wait
from llmgw.chargeback import charge_window
from llmgw.config.chargeback import ChargebackConfig
from llmgw.config.types import parse_duration
from llmgw.dev.cluster import Cluster, ClusterPlan, NodePlan, admin_get, admin_post, admin_up, prepare
from llmgw.records.chargeback import OPERATOR, ReplicaSpan
from llmgw.store.base import UsageRecord
from llmgw.store.sqlite import SqliteStore

GPUS = 2
SETTLE_S = 5.0
WORK = {"long": 40, "mid": 20, "short": 10}  # tokens each key asks for per request


def chat(plan: ClusterPlan, key: str, tokens: int) -> tuple[int, int]:
    body = json.dumps({"model": "m", "max_tokens": tokens, "messages": [{"role": "user", "content": "hi"}]})
    req = urllib.request.Request(plan.api + "/v1/chat/completions", data=body.encode(),
                                 headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        usage = json.loads(r.read())["usage"]
        return int(usage["prompt_tokens"]), int(usage["completion_tokens"])


def busy_by_key(plan: ClusterPlan, until: float, window_s: float) -> dict[str, float]:
    """Busy GPU-seconds per key, once every window up to `until` is charged."""
    store = SqliteStore(plan.workdir / "state" / "llmgw.db").open()
    try:
        wait(lambda: store.charge_mark() >= until, window_s + SETTLE_S + 60, "the windows charged")
        out: dict[str, float] = {}
        for r in store.charges_since(0):
            if r.key_id != OPERATOR:
                out[r.key_id] = out.get(r.key_id, 0.0) + r.busy_s
        return out
    finally:
        store.close()


def run_case(plan: ClusterPlan, keys: dict[str, dict[str, str]], rounds: int, together: bool, window_s: float
             ) -> tuple[dict[str, float], dict[str, int]]:
    """Each key's busy GPU-seconds from this case alone (the charges after, less those before), and the tokens it
    had processed (prompt and completion: the work the model weighs, at the default prompt_weight 1)."""
    before = busy_by_key(plan, time.time(), window_s)
    asked: dict[str, int] = dict.fromkeys(WORK, 0)
    work: dict[str, int] = dict.fromkeys(WORK, 0)

    def one(name: str) -> None:
        prompt, completion = chat(plan, keys[name]["key"], WORK[name])
        asked[name] += completion
        work[name] += prompt + completion

    def key_loop(name: str) -> None:
        for _ in range(rounds):
            one(name)

    if together:
        threads = [threading.Thread(target=key_loop, args=(n,)) for n in WORK]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        for _ in range(rounds):
            for n in WORK:
                one(n)
    after = busy_by_key(plan, time.time(), window_s)
    if sum(asked.values()) != rounds * sum(WORK.values()):
        raise SystemExit(f"requests answered short: {asked}")
    return {n: after.get(keys[n]["id"], 0.0) - before.get(keys[n]["id"], 0.0) for n in WORK}, work


def report(case: str, busy: dict[str, float], work: dict[str, int]) -> float:
    total_busy, total_work = sum(busy.values()), sum(work.values())
    worst = 0.0
    for n in WORK:
        share, part = busy[n] / total_busy, work[n] / total_work
        worst = max(worst, abs(share / part - 1))
        print(f"  {case:<10} {n:<6} tokens {part:6.1%}  GPU-seconds {busy[n]:7.3f} = {share:6.1%}  "
              f"ratio {share / part:5.3f}")
    print(f"  {case:<10} worst |GPU share / work share - 1|: {worst:.1%}")
    return worst


def chargeback_cost(n: int, replicas: int = 50) -> None:
    """`charge_window()` over one window of `n` random requests, best of three, against sorting them (its baseline)."""
    rng = random.Random(1)
    spans = [ReplicaSpan(id=f"r{i}", model="m", gpus=8, gpu_class="H100", demand=True, created_at=0, ready_at=0)
             for i in range(replicas)]
    recs = [UsageRecord(id=f"u{j:08d}", key_id=f"k{j % 40}", model="m", replica_id=f"r{j % replicas}",
                        prompt_tokens=100, completion_tokens=200, started_at=rng.uniform(0, 60),
                        duration_s=rng.uniform(0.5, 20), status=200) for j in range(n)]
    cfg = ChargebackConfig(rates={"H100": 2.5})

    def best(f: Callable[[], object]) -> float:
        times = []
        for _ in range(3):
            t = time.perf_counter()
            f()
            times.append(time.perf_counter() - t)
        return min(times)

    took = best(lambda: charge_window(0, 60, spans, recs, cfg))
    sort = best(lambda: sorted(recs, key=lambda r: (r.replica_id, r.started_at)))
    print(f"chargeback: {n} requests on {replicas} replicas in one window: {took * 1e3:.0f} ms, "
          f"{took / n * 1e6:.1f} us per request, {took / sort:.1f}x a sort of the same records ({sort * 1e3:.0f} ms)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--tps", type=float, default=20.0, help="the sim's tokens per second")
    ap.add_argument("--window", default="60s", help="chargeback.window: busy time is pooled within one")
    ap.add_argument("--smoke", action="store_true", help="one round at 200 tokens/s, 1 s windows: that it runs")
    a = ap.parse_args()
    if a.smoke:
        a.rounds, a.tps, a.window = 1, 200.0, "1s"
    model = {"name": "m", "source": "org/m", "engine": "sim",
             "profile": {"gpus_per_shard": GPUS, "gpu_class": "H100-80G",
                         "sim": {"tokens": 200, "tokens_per_second": a.tps}},
             "scaling": {"min": 1, "max": 1}}
    with tempfile.TemporaryDirectory() as tmp:
        plan = ClusterPlan(workdir=Path(tmp), nodes=[NodePlan(id="node01", address="127.0.0.1",
                                                              port_range=engine_ports())],
                           models=[model], agent_port=free_port(), api_port=free_port(), admin_port=free_port(),
                           heartbeat_interval="1s", reconcile_interval="0.5s", load_wait="60s",
                           extra_server={"chargeback": {"window": a.window, "settle_after": f"{SETTLE_S:g}s"}})
        prepare(plan)
        cluster = Cluster(plan)
        cluster.start()
        try:
            wait(lambda: admin_up(plan), 30, "the control plane")
            wait(lambda: any(r["ready_at"] for r in admin_get(plan, "/api/replicas")), 60, "the model ready")
            keys = {n: admin_post(plan, "/api/keys", {"name": n}) for n in WORK}
            print(f"chargeback on the sim: {GPUS} GPUs, {a.tps:g} tokens/s, requests of {WORK} tokens, "
                  f"{a.rounds} round(s), {a.window} windows")
            window_s = parse_duration(a.window)
            report("sequential", *run_case(plan, keys, a.rounds, False, window_s))
            report("concurrent", *run_case(plan, keys, a.rounds, True, window_s))
        finally:
            cluster.stop()
    chargeback_cost(6_000 if a.smoke else 60_000)


if __name__ == "__main__":
    main()
