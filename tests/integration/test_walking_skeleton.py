"""One request end to end: real server and agent processes, real TLS, a real llama-server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from bench.addresses import engine_ports, loopback

from llmgw.dev.cluster import SMOLLM2, Cluster, ClusterPlan, NodePlan, admin_get, admin_post, admin_up
from tests.harness import plan, wait_until
from tests.integration.conftest import dump_logs

HOST_A = loopback()  # the address this module's tests name (bench/addresses.py)

MODELS = [
    {
        "name": "smollm2",
        "source": SMOLLM2,
        "engine": "llamacpp",
        "profile": {"memory": "512Mi"},
        "scaling": {"min": 1, "max": 1},
    },
    {
        "name": "sim-small",
        "source": "org/sim-small",
        "engine": "sim",
        "profile": {"gpus_per_shard": 2, "gpu_class": "H100-80G"},
        "scaling": {"min": 1, "max": 1},
    },
]


def ctl(p: ClusterPlan, *args: str) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "llmgw.cli.main", "ctl", *args, "--admin", p.admin],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "COLUMNS": "200", "LLMGW_ADMIN_TOKEN_FILE": str(p.token_file)},
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def chat(p: ClusterPlan, key: str, model: str, stream: bool = False) -> tuple[int, bytes]:
    body = {
        "model": model,
        "max_tokens": 12,
        "stream": stream,
        "messages": [{"role": "user", "content": "Name one colour."}],
    }
    req = urllib.request.Request(
        p.api + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.status, r.read()


def ready_replicas(p: ClusterPlan) -> dict[str, dict[str, Any]]:
    return {r["model"]: r for r in admin_get(p, "/api/status")["replicas"] if r["state"] == "ready"}


def test_one_request_end_to_end_and_state_survives_a_server_restart(tmp_path: Path, running: list[Cluster]) -> None:
    p = plan(
        tmp_path,
        [
            NodePlan(id="cpu01", address=HOST_A, kind="cpu", gpus=0, port_range=engine_ports()),
            NodePlan(
                id="node01",
                address=loopback(),
                fabric="ib-a",
                adapters={"mlx5_0": "ACTIVE"},
                port_range=engine_ports(),
            ),
        ],
        MODELS,
        heartbeat_interval="0.5s",
        reconcile_interval="0.3s",
    )
    c = Cluster(p)
    running.append(c)
    c.start()
    try:
        wait_until(lambda: admin_up(p), 20, "control plane up")
        wait_until(lambda: len(admin_get(p, "/api/nodes")) == 2, 30, "both nodes registered")

        out = ctl(p, "nodes")
        assert "cpu01" in out and HOST_A in out and "llamacpp" in out
        assert "node01" in out and "8x H100-80G" in out and "ib-a" in out
        rows = {r["node"]: r for r in json.loads(ctl(p, "nodes", "--json"))}
        assert rows["node01"]["gpu_count"] == 8 and rows["cpu01"]["gpu_count"] == 0
        assert rows["cpu01"]["state"] == "live"

        ready = wait_until(lambda: len(ready_replicas(p)) == 2 and ready_replicas(p), 120, "both replicas Ready")
        assert ready["smollm2"]["nodes"] == ["cpu01"]
        assert ready["sim-small"]["nodes"] == ["node01"]

        key = admin_post(p, "/api/keys", {"name": "test"})["key"]
        status, body = chat(p, key, "smollm2")
        assert status == 200
        answer = json.loads(body)
        assert answer["choices"][0]["message"]["content"].strip()
        assert answer["usage"]["completion_tokens"] > 0
        assert "timings" in answer  # llama-server's own field: the tokens came from the real engine
        # each model's context length as its engine serves it, asked through its node's gate (router/model_facts.py)
        listed = urllib.request.Request(p.api + "/v1/models", headers={"Authorization": f"Bearer {key}"})
        with urllib.request.urlopen(listed, timeout=30) as r:
            contexts = {m["id"]: m.get("max_model_len") for m in json.loads(r.read())["data"]}
        assert isinstance(contexts["smollm2"], int) and contexts["smollm2"] > 0, contexts
        assert contexts["sim-small"] == 4096, contexts

        status, raw = chat(p, key, "smollm2", stream=True)
        events = [ln for ln in raw.decode().split("\n\n") if ln.startswith("data: ")]
        assert len(events) >= 3 and events[-1] == "data: [DONE]"
        assert json.loads(events[1][6:])["object"] == "chat.completion.chunk"

        def llama_load() -> dict[str, Any] | None:
            line = next(r for r in admin_get(p, "/api/status")["replicas"] if r["model"] == "smollm2")
            return line["load"]  # type: ignore[no-any-return]

        # llama-server's own gauges (llamacpp:requests_processing/deferred), read by the agent, under llmgw's names
        # (read at the agent's last probe: the requests above may still be in it; idle, it says so)
        load = wait_until(lambda: (x := llama_load()) and x["running"] == 0 and x, 20, "llama-server's load, idle")
        assert load["waiting"] == 0 and load["kv_cache_usage"] is None  # this build has no KV cache gauge

        before = {r["id"]: r for r in admin_get(p, "/api/replicas")}
        llama_pid = next(s["pid"] for s in admin_get(p, "/api/nodes/cpu01")["report"]["shards"])

        c.stop_process("server")
        c.start_server()
        wait_until(lambda: admin_up(p), 20, "control plane back")
        assert {n["node"] for n in admin_get(p, "/api/nodes")} == {"cpu01", "node01"}
        assert [m["name"] for m in admin_get(p, "/api/models")] == ["smollm2", "sim-small"]
        after = {r["id"]: r for r in admin_get(p, "/api/replicas")}
        assert after.keys() == before.keys()
        # adopted, not restarted: the same replicas become ready with the same engine process
        wait_until(lambda: len(ready_replicas(p)) == 2, 30, "replicas ready again after restart")
        assert {r["id"] for r in ready_replicas(p).values()} == set(before)
        assert next(s["pid"] for s in admin_get(p, "/api/nodes/cpu01")["report"]["shards"]) == llama_pid
        key2 = admin_post(p, "/api/keys", {"name": "after-restart"})["key"]
        assert chat(p, key2, "smollm2")[0] == 200
        assert chat(p, key, "smollm2")[0] == 200  # keys survive too
    except BaseException:
        print(dump_logs(p))
        raise
