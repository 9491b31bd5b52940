"""On demand, end to end: a request loads a model, an idle one makes room for it, and idle ones stop."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from bench.addresses import engine_ports, loopback

from llmgw.dev.cluster import Cluster, ClusterPlan, NodePlan, admin_get, admin_post
from tests.harness import plan, wait_until
from tests.integration.conftest import dump_logs, start_cluster


def od(name: str, idle: str) -> dict[str, Any]:
    return {"name": name, "source": f"org/{name}", "engine": "sim",
            "profile": {"gpus_per_shard": 8, "gpu_class": "H100-80G", "sim": {"tokens": 3}},
            "scaling": {"min": 0, "max": 1, "stop_unused_after": idle}}


def chat(p: ClusterPlan, key: str, model: str) -> tuple[int, dict[str, Any], float]:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]}).encode()
    req = urllib.request.Request(p.api + "/v1/chat/completions", data=body,
                                 headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read()), time.monotonic() - t0
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), time.monotonic() - t0


def test_load_on_demand_evict_idle_and_stop_when_unused(tmp_path: Path, running: list[Cluster]) -> None:
    p = plan(tmp_path, [NodePlan(id="node01", address=loopback(), port_range=engine_ports())],
             [od("od-a", "10m"), od("od-b", "4s")], heartbeat_interval="0.3s", reconcile_interval="0.2s",
             load_wait="12s", extra_server={"eviction": {"idle_after": "1s", "protect_after_ready": "2s"}})
    start_cluster(p, running)
    try:
        wait_until(lambda: admin_get(p, "/api/nodes"), 20, "node registered")
        assert admin_get(p, "/api/replicas") == []  # min 0: nothing runs until asked
        key = admin_post(p, "/api/keys", {"name": "t"})["key"]

        status, body, _ = chat(p, key, "od-a")  # waits while the model loads, then is answered
        assert status == 200, body
        assert body["usage"]["completion_tokens"] == 3

        # od-b needs the whole node; od-a is idle after 1 s and past its 2 s protection, so it is evicted
        status, body, _ = chat(p, key, "od-b")
        assert status == 200, body
        events = [e["message"] for e in admin_get(p, "/api/events?limit=200")]
        assert any("evicted: idle, to make room for od-b" in e for e in events), events
        assert {r["model"] for r in admin_get(p, "/api/replicas")} == {"od-b"}

        # unused for its 4 s stop_unused_after, od-b stops and its GPUs come back
        def all_free() -> bool:
            cap = admin_get(p, "/api/status")["capacity"]
            return bool(admin_get(p, "/api/replicas") == [] and cap and cap[0]["free"] == 8)

        wait_until(all_free, 15, "od-b stopped for idleness and its GPUs free")
        events = [e["message"] for e in admin_get(p, "/api/events?limit=200")]
        assert any("of od-b stopping: idle" in e for e in events), events
    except BaseException:
        print(dump_logs(p))
        raise


def test_a_model_that_cannot_load_answers_503_loading_after_load_wait(tmp_path: Path, running: list[Cluster]) -> None:
    big = od("od-huge", "10m")
    big["profile"]["gpus_per_shard"] = 16
    p = plan(tmp_path, [NodePlan(id="node01", address=loopback(), port_range=engine_ports())], [big],
             heartbeat_interval="0.3s", reconcile_interval="0.2s", load_wait="1s")
    start_cluster(p, running)
    try:
        key = admin_post(p, "/api/keys", {"name": "t"})["key"]
        status, body, took = chat(p, key, "od-huge")
        assert status == 503
        assert body["error"]["message"].startswith("the model is loading")
        assert took >= 1.0
        status, body, _ = chat(p, key, "od-typo")
        assert status == 404 and body["error"]["code"] == "model_not_found"
    except BaseException:
        print(dump_logs(p))
        raise


def test_a_cold_start_does_not_wait_for_heartbeats(tmp_path: Path, running: list[Cluster]) -> None:
    """Heartbeats 20 s apart and a reconcile pass every 5 s: the request that asks for the model is answered once
    the engine has loaded (1 s), without waiting for any of them. The control plane places the model as soon as it
    is asked for; the node hears of its shard from its watch; the agent reports the engine serving the moment it
    does; the control plane marks the replica ready on that report, and the router sends the request."""
    m = od("od-cold", "10m")
    m["profile"]["sim"]["load_seconds"] = "1s"
    p = plan(tmp_path, [NodePlan(id="node01", address=loopback(), port_range=engine_ports())], [m],
             heartbeat_interval="20s", reconcile_interval="5s", load_wait="30s")
    start_cluster(p, running)
    try:
        wait_until(lambda: admin_get(p, "/api/nodes"), 20, "node registered")
        key = admin_post(p, "/api/keys", {"name": "t"})["key"]
        status, body, took = chat(p, key, "od-cold")
        assert status == 200, body
        # the next heartbeat is up to 20 s away; a loaded machine starts the sim engine's interpreter in a few seconds
        print(f"cold start answered in {took:.1f}s")
        assert took < 12, f"answered {took:.1f}s after it was asked: it waited on a heartbeat or a pass"
    except BaseException:
        print(dump_logs(p))
        raise
