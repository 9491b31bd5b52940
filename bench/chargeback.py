"""Chargeback's error on the sim: keys sending known amounts of work to one model (a sim engine generating a known
number of tokens per second), each key's share of the busy GPU-seconds charged against its share of the tokens it
asked for; one after the other, then all at once. Method and figures: docs/tenants.md, "Chargeback: how GPU time
is attributed".

    .venv/bin/python -m bench.chargeback             # 3 keys, 4 rounds, 20 tokens/s: about a minute
    .venv/bin/python -m bench.chargeback --smoke     # 1 round, faster tokens: that it runs
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from tests.harness import free_port

from bench.coldstart import wait
from llmgw.dev.cluster import Cluster, ClusterPlan, NodePlan, admin_get, admin_post, admin_up, prepare
from llmgw.records.chargeback import OPERATOR
from llmgw.store.sqlite import SqliteStore

GPUS = 2
WORK = {"long": 40, "mid": 20, "short": 10}  # tokens each key asks for per request


def chat(plan: ClusterPlan, key: str, tokens: int) -> int:
    body = json.dumps({"model": "m", "max_tokens": tokens, "messages": [{"role": "user", "content": "hi"}]})
    req = urllib.request.Request(plan.api + "/v1/chat/completions", data=body.encode(),
                                 headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return int(json.loads(r.read())["usage"]["completion_tokens"])


def busy_by_key(plan: ClusterPlan, until: float) -> dict[str, float]:
    """Busy GPU-seconds per key, once every window up to `until` is accounted."""
    store = SqliteStore(plan.workdir / "state" / "llmgw.db").open()
    try:
        wait(lambda: store.charge_mark() >= until, 60, "the windows accounted")
        out: dict[str, float] = {}
        for r in store.charges_since(0):
            if r.key_id != OPERATOR:
                out[r.key_id] = out.get(r.key_id, 0.0) + r.busy_s
        return out
    finally:
        store.close()


def run_case(plan: ClusterPlan, keys: dict[str, dict[str, str]], rounds: int, together: bool) -> dict[str, float]:
    """Each key's busy GPU-seconds from this case alone (the charges after, less those before)."""
    before = busy_by_key(plan, time.time())
    sent: dict[str, int] = dict.fromkeys(WORK, 0)

    def key_loop(name: str) -> None:
        for _ in range(rounds):
            sent[name] += chat(plan, keys[name]["key"], WORK[name])

    if together:
        threads = [threading.Thread(target=key_loop, args=(n,)) for n in WORK]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        for _ in range(rounds):
            for n in WORK:
                sent[n] += chat(plan, keys[n]["key"], WORK[n])
    after = busy_by_key(plan, time.time())
    if sum(sent.values()) != rounds * sum(WORK.values()):
        raise SystemExit(f"requests answered short: {sent}")
    return {n: after.get(keys[n]["id"], 0.0) - before.get(keys[n]["id"], 0.0) for n in WORK}


def report(case: str, busy: dict[str, float]) -> float:
    total_busy, total_work = sum(busy.values()), sum(WORK.values())
    worst = 0.0
    for n in WORK:
        share, work = busy[n] / total_busy, WORK[n] / total_work
        worst = max(worst, abs(share / work - 1))
        print(f"  {case:<10} {n:<6} work {work:6.1%}  GPU-seconds {busy[n]:7.3f} = {share:6.1%}  "
              f"ratio {share / work:5.3f}")
    print(f"  {case:<10} worst |GPU share / work share - 1|: {worst:.1%}")
    return worst


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--tps", type=float, default=20.0, help="the sim's tokens per second")
    ap.add_argument("--smoke", action="store_true", help="one round at 200 tokens/s: that it runs")
    a = ap.parse_args()
    if a.smoke:
        a.rounds, a.tps = 1, 200.0
    model = {"name": "m", "source": "org/m", "engine": "sim",
             "profile": {"gpus_per_shard": GPUS, "gpu_class": "H100-80G",
                         "sim": {"tokens": 200, "tokens_per_second": a.tps}},
             "scaling": {"min": 1, "max": 1}}
    with tempfile.TemporaryDirectory() as tmp:
        plan = ClusterPlan(workdir=Path(tmp), nodes=[NodePlan(id="node01", address="127.0.0.1",
                                                              port_range="26500-26599")],
                           models=[model], agent_port=free_port(), api_port=free_port(), admin_port=free_port(),
                           heartbeat_interval="1s", reconcile_interval="0.5s", load_wait="60s",
                           extra_server={"chargeback": {"window": "1s", "settle_after": "5s"}})
        prepare(plan)
        cluster = Cluster(plan)
        cluster.start()
        try:
            wait(lambda: admin_up(plan), 30, "the control plane")
            wait(lambda: any(r["ready_at"] for r in admin_get(plan, "/api/replicas")), 60, "the model ready")
            keys = {n: admin_post(plan, "/api/keys", {"name": n}) for n in WORK}
            print(f"chargeback on the sim: {GPUS} GPUs, {a.tps:g} tokens/s, requests of {WORK} tokens, "
                  f"{a.rounds} round(s)")
            report("sequential", run_case(plan, keys, a.rounds, together=False))
            report("concurrent", run_case(plan, keys, a.rounds, together=True))
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
