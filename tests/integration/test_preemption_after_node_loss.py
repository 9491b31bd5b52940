"""A promise outranks a convenience, with real processes: a two-node replica of a model at min 1 loses a node, the
only other fabric's free room is held by an on-demand model used a moment ago, and the replacement preempts it and
is Ready within seconds, not after the on-demand model's 10-minute idle timeout."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.addresses import engine_ports, loopback

from llmgw.dev.cluster import Cluster, ClusterPlan, NodePlan, admin_get, admin_post
from tests.harness import plan, wait_until
from tests.integration.conftest import dump_logs, start_cluster

FABRIC = {"node01": "ib-a", "node02": "ib-a", "node03": "ib-b", "node04": "ib-b"}
BIG = {"name": "big", "source": "org/big-405b", "engine": "sim",
       "profile": {"gpus_per_shard": 4, "nodes": 2, "gpu_class": "H100-80G", "sim": {"tokens": 3}},
       "scaling": {"min": 1, "max": 1}}
SMALL = {"name": "small", "source": "org/small-8b", "engine": "sim",
         "profile": {"gpus_per_shard": 2, "gpu_class": "H100-80G", "sim": {"tokens": 3}},
         "scaling": {"min": 0, "max": 1, "stop_unused_after": "10m"}}


def nodes() -> list[NodePlan]:
    return [NodePlan(id=n, address=loopback(), fabric=f, adapters={"mlx5_0": "ACTIVE", "mlx5_1": "ACTIVE"},
                     port_range=engine_ports())
            for i, (n, f) in enumerate(FABRIC.items())]


def chat(p: ClusterPlan, key: str, model: str) -> dict[str, Any]:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]}).encode()
    req = urllib.request.Request(p.api + "/v1/chat/completions", data=body,
                                 headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


def metrics(p: ClusterPlan) -> str:
    req = urllib.request.Request(p.admin + "/metrics",
                                 headers={"Authorization": f"Bearer {p.token_file.read_text().strip()}"})
    with urllib.request.urlopen(req, timeout=5) as r:
        return str(r.read().decode())


def ready(p: ClusterPlan, model: str) -> list[dict[str, Any]]:
    return [r for r in admin_get(p, "/api/status")["replicas"] if r["model"] == model and r["state"] == "ready"]


def test_a_lost_min_1_replica_preempts_a_recently_used_on_demand_one(tmp_path: Path, running: list[Cluster]) -> None:
    # eviction's own rules (idle 30 s, ready for 5 minutes) cannot take the on-demand replica: only preemption can
    p = plan(tmp_path, nodes(), [BIG, SMALL], heartbeat_interval="0.3s", reconcile_interval="0.2s",
             node_lost_after="4s", load_wait="15s", extra_server={"drain_timeout": "10s"})
    c = start_cluster(p, running)
    try:
        (big,) = wait_until(lambda: ready(p, "big"), 60, "the two-node replica of big ready")
        key = admin_post(p, "/api/keys", {"name": "t"})["key"]
        assert chat(p, key, "small")["usage"]["completion_tokens"] == 3  # loads it, and uses it
        (small,) = ready(p, "small")
        fabric = FABRIC[big["nodes"][0]]
        assert FABRIC[small["nodes"][0]] != fabric, "big holds its fabric's nodes whole"

        # kill big's second node's agent and engines, as a dead machine would
        worker = big["nodes"][1]
        shards = admin_get(p, f"/api/nodes/{worker}")["report"]["shards"]
        c.stop_process(f"agent-{worker}", signal.SIGKILL)
        for s in shards:
            if s["pid"]:
                os.killpg(s["pid"], signal.SIGKILL)

        def failed() -> bool:
            row = next((r for r in admin_get(p, "/api/replicas") if r["id"] == big["id"]), None)
            return row is None or bool(row["failed"])

        wait_until(failed, 10, "big's broken replica failed")
        known = time.monotonic()
        (again,) = wait_until(lambda: [r for r in ready(p, "big") if r["id"] != big["id"]], 20,
                              lambda: f"a replacement of big ready: {admin_get(p, '/api/status')['replicas']}")
        took = time.monotonic() - known
        print(f"replacement ready {took:.1f}s after the loss was known")
        assert {FABRIC[n] for n in again["nodes"]} == {FABRIC[small["nodes"][0]]}
        events = [e["message"] for e in admin_get(p, "/api/events?limit=500")]
        said = f"replica {small['id']} of small preempted for big (priority 100 over 0): drains, then stops"
        assert said in events, events
        assert 'llmgw_preemptions_total{for_model="big",model="small"} 1.0' in metrics(p)
        assert not ready(p, "small")
    except BaseException:
        print(dump_logs(p))
        raise
