"""Several API worker processes on one port: each serves, keys and usage flow through the control plane."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

from bench.addresses import engine_ports, loopback

from llmgw.dev.cluster import Cluster, ClusterPlan, NodePlan, admin_get, admin_post, admin_up
from tests.harness import plan, wait_until
from tests.integration.conftest import dump_logs

MODELS = [
    {"name": "m", "source": "org/m", "engine": "sim", "profile": {"gpus_per_shard": 1, "sim": {"tokens": 2}},
     "scaling": {"min": 1, "max": 1}},
    {"name": "od", "source": "org/od", "engine": "sim", "profile": {"gpus_per_shard": 1, "sim": {"tokens": 2}},
     "scaling": {"min": 0, "max": 1}},
]


def chat(p: ClusterPlan, key: str, model: str = "m") -> tuple[int, str]:
    req = urllib.request.Request(
        p.api + "/v1/chat/completions",
        data=json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]}).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json", "Connection": "close"},
    )
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status, r.headers.get("X-Llmgw-Worker", "")
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("X-Llmgw-Worker", "")


def test_two_api_workers_share_the_port(tmp_path: Path, running: list[Cluster]) -> None:
    p = plan(tmp_path, [NodePlan(id="node01", address=loopback(), port_range=engine_ports())], MODELS,
             heartbeat_interval="0.3s", reconcile_interval="0.2s",
             extra_server={"api_workers": 2, "router": {"expose_routing": True}})  # answers name their worker
    c = Cluster(p)
    running.append(c)
    c.start()
    try:
        wait_until(lambda: admin_up(p), 20, "control plane up")
        wait_until(lambda: any(r["state"] == "ready" for r in admin_get(p, "/api/status")["replicas"]), 30,
                   "model m ready")
        key = admin_post(p, "/api/keys", {"name": "made-after-start"})["key"]  # both workers must learn it
        served_by: set[str] = set()

        def both_serve() -> bool:
            status, worker = chat(p, key)
            assert status in (200, 401)
            if status == 200:
                served_by.add(worker)
            return len(served_by) == 2

        wait_until(both_serve, 30, "answers from two different worker processes", interval=0.01)
        status, _ = chat(p, key, "od")  # a worker process's demand reaches the control plane and loads it
        assert status == 200
        wait_until(lambda: sum(u["requests"] for u in admin_get(p, "/api/status")["usage"]) >= 3, 10,
                   "usage from every worker recorded")

        # a key's limits are counted in one place for every worker: 2 a minute is 2, not 2 per process
        limited = admin_post(p, "/api/keys", {"name": "two-a-minute", "limits": {"rpm": 2}})["key"]
        wait_until(lambda: chat(p, limited)[0] == 200, 10, "the new key known to a worker")
        answers: list[tuple[int, str]] = []

        def both_refuse() -> bool:  # connections land on either process at random: until each has answered
            status, worker = chat(p, limited)
            if status != 401:  # the other process has not read the new key yet
                answers.append((status, worker))
            return {w for s, w in answers if s == 429} == served_by

        wait_until(both_refuse, 20, "refusals from both processes", interval=0.01)
        assert sorted(s for s, _ in answers) == [200] + [429] * (len(answers) - 1), answers
    except BaseException:
        print(dump_logs(p))
        raise
