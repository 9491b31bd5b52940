"""Wake against cold load: from the request that asks for an on-demand model to its first token, when the model is
not running (a cold load) and when its replica sleeps (a wake), on a real control plane, agent and router with a sim
engine whose load and wake times are set (by default a 30 s load and a 2 s wake, scaled down by --scale). Method and
figures: docs/benchmarks.md, "Wake against cold load".

    .venv/bin/python -m bench.wake                      # 30 s load and 2 s wake at a tenth: about a minute
    .venv/bin/python -m bench.wake --scale 1 --runs 3   # the times as they are
    .venv/bin/python -m bench.wake --smoke              # one run, a 0.5 s load: that it runs
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from bench.addresses import engine_ports, free_port
from bench.coldstart import first_token, wait
from llmgw.dev.cluster import Cluster, ClusterPlan, NodePlan, admin_get, admin_post, admin_up, prepare


def asleep(plan: ClusterPlan, model: str) -> bool:
    """The model's replica is asleep as its agent says (its engine answered the sleep), not only as decided."""
    for r in admin_get(plan, "/api/replicas"):
        ready = next((c for c in r["conditions"] if c["type"] == "Ready"), None)
        if r["model"] == model and r["sleep_level"] and ready is not None and "asleep at level" in ready["message"]:
            return True
    return False


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--load", type=float, default=30.0, help="seconds the engine takes to load its model")
    ap.add_argument("--wake", type=float, default=2.0, help="seconds it takes to wake from a level-1 sleep")
    ap.add_argument("--scale", type=float, default=0.1, help="both times are multiplied by this")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help="one run, a 0.5 s load and a 0.05 s wake: that it runs")
    a = ap.parse_args()
    if a.smoke:
        a.load, a.wake, a.scale, a.runs = 0.5, 0.05, 1.0, 1
    load, wake = a.load * a.scale, a.wake * a.scale
    names = [f"wake-{i}" for i in range(a.runs)]
    models = [{"name": n, "source": f"org/{n}", "engine": "sim",
               "profile": {"gpus_per_shard": 1, "gpu_class": "H100-80G",
                           "sim": {"tokens": 4, "load_seconds": load, "wake_seconds": wake}},
               "scaling": {"min": 0, "max": 1, "stop_unused_after": "1s"},
               "sleep": {"level": 1, "min_stay": "0s"}} for n in names]
    with tempfile.TemporaryDirectory() as tmp:
        plan = ClusterPlan(workdir=Path(tmp), nodes=[NodePlan(id="node01", address="127.0.0.1",
                                                              port_range=engine_ports())],
                           models=models, agent_port=free_port(), api_port=free_port(), admin_port=free_port(),
                           heartbeat_interval="1s", reconcile_interval="0.5s", load_wait="120s")
        prepare(plan)
        cluster = Cluster(plan)
        cluster.start()
        try:
            wait(lambda: admin_up(plan), 30, "the control plane")
            wait(lambda: admin_get(plan, "/api/nodes"), 30, "the node")
            key = admin_post(plan, "/api/keys", {"name": "bench"})["key"]
            cold, woken = [], []
            for n in names:
                cold.append(first_token(plan.api_port, key, n))
                wait(lambda n=n: asleep(plan, n), 60, f"{n} asleep")  # type: ignore[misc]
                woken.append(first_token(plan.api_port, key, n))
        finally:
            cluster.stop()
    print(f"wake against cold load, sim engine loading {load:.2f}s and waking {wake:.2f}s, {a.runs} runs (medians)")
    print(f"  request to first token, cold load:   {statistics.median(cold):6.2f} s "
          f"(min {min(cold):.2f}, max {max(cold):.2f})")
    print(f"  request to first token, wake:        {statistics.median(woken):6.2f} s "
          f"(min {min(woken):.2f}, max {max(woken):.2f})")
    print(f"  wake beyond the engine's own wake:   {statistics.median(woken) - wake:6.2f} s")
    print(f"  ratio cold / wake:                   {statistics.median(cold) / statistics.median(woken):6.2f}")


if __name__ == "__main__":
    main()
