"""Cold start: from the request that asks for an on-demand model to its first token, against the time the engine
alone takes to start and load, measured in the same run (real control plane and agent, a sim engine that loads for
--load seconds). Method and figures: docs/benchmarks.md, "Cold start".

    .venv/bin/python -m bench.coldstart                 # about a minute
    .venv/bin/python -m bench.coldstart --load 2 --runs 5 --heartbeat 3s --reconcile 1s
    .venv/bin/python -m bench.coldstart --smoke         # one run, a 0.2 s load, 1 s heartbeats: that it runs
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.addresses import engine_ports, free_port
from llmgw.dev.cluster import Cluster, ClusterPlan, NodePlan, admin_get, admin_post, admin_up, prepare


def wait(cond: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            v = cond()
            if v:
                return v
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for {what}")


def engine_alone(load: float) -> float:
    """Seconds from starting the sim engine to its /health answering 200."""
    port = free_port()
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "llmgw.sim.engine", "--model", "m", "--host", "127.0.0.1",
                          "--port", str(port), "--load-seconds", str(load)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                    if r.status == 200:
                        return time.perf_counter() - t0
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.01)
    finally:
        p.terminate()
        p.wait()


def first_token(api_port: int, key: str, model: str) -> float:
    """Seconds from sending a streamed chat request to its first content event."""
    body = json.dumps({"model": model, "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", api_port, timeout=120)
    try:
        c.request("POST", "/v1/chat/completions", body, {"Authorization": f"Bearer {key}",
                                                         "Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            raise SystemExit(f"{model}: {r.status} {r.read()[:300]!r}")
        while True:
            line = r.readline()
            if not line:
                raise SystemExit(f"{model}: the stream ended without content")
            if line.startswith(b"data: {") and b'"content"' in line:
                return time.perf_counter() - t0
    finally:
        c.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--load", type=float, default=2.0, help="seconds the sim engine takes to load its model")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--heartbeat", default="3s")
    ap.add_argument("--reconcile", default="1s")
    ap.add_argument("--smoke", action="store_true", help="one run, a 0.2 s load, 1 s heartbeats: that it runs")
    a = ap.parse_args()
    if a.smoke:
        a.load, a.runs, a.heartbeat, a.reconcile = 0.2, 1, "1s", "0.5s"
    names = [f"cold-{i}" for i in range(a.runs)]
    models = [{"name": n, "source": f"org/{n}", "engine": "sim",
               "profile": {"gpus_per_shard": 1, "gpu_class": "H100-80G",
                           "sim": {"tokens": 4, "load_seconds": a.load}},
               "scaling": {"min": 0, "max": 1, "stop_unused_after": "10m"}} for n in names]
    with tempfile.TemporaryDirectory() as tmp:
        plan = ClusterPlan(workdir=Path(tmp), nodes=[NodePlan(id="node01", address="127.0.0.1",
                                                              port_range=engine_ports())],
                           models=models, agent_port=free_port(), api_port=free_port(), admin_port=free_port(),
                           heartbeat_interval=a.heartbeat, reconcile_interval=a.reconcile, load_wait="60s")
        prepare(plan)
        cluster = Cluster(plan)
        cluster.start()
        try:
            wait(lambda: admin_up(plan), 30, "the control plane")
            wait(lambda: admin_get(plan, "/api/nodes"), 30, "the node")
            key = admin_post(plan, "/api/keys", {"name": "bench"})["key"]
            alone, cold = [], []
            for n in names:
                alone.append(engine_alone(a.load))
                cold.append(first_token(plan.api_port, key, n))
        finally:
            cluster.stop()
    over = [c - e for c, e in zip(cold, alone, strict=True)]
    print(f"cold start, sim engine loading {a.load:.1f}s, heartbeat {a.heartbeat}, reconcile {a.reconcile}, "
          f"{a.runs} runs (medians)")
    print(f"  engine alone, start to ready:        {statistics.median(alone):6.2f} s")
    print(f"  request to first token (cold):       {statistics.median(cold):6.2f} s")
    print(f"  overhead beyond the engine's load:   {statistics.median(over):6.2f} s "
          f"(min {min(over):.2f}, max {max(over):.2f})")
    print(f"  ratio cold / engine alone:           {statistics.median(cold) / statistics.median(alone):6.2f}")


if __name__ == "__main__":
    main()
