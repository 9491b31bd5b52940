"""A LoRA adapter end to end with real processes: the catalog names it by URL, the node fetches it (its digest
checked), llama-server loads it beside SmolLM2, and through the router it answers as a model of its own, otherwise
than the base at temperature 0; ctl status and /metrics say which replica serves it."""

from __future__ import annotations

import hashlib
import json
import urllib.request
from pathlib import Path
from typing import Any

from bench.addresses import engine_ports, loopback

from llmgw.dev.cluster import SMOLLM2, Cluster, ClusterPlan, NodePlan, admin_get, admin_post, admin_up
from tests.agent.installs.release import Release, release_server
from tests.harness import plan, wait_until
from tests.integration.conftest import dump_logs
from tests.integration.test_walking_skeleton import ctl
from tests.router.lora import base_model_file, make_adapter

ADAPTER = "smollm2-pirate"


def ask(p: ClusterPlan, key: str, model: str) -> dict[str, Any]:
    body = {"model": model, "temperature": 0, "max_tokens": 12, "messages": [{"role": "user", "content": "Say hello"}]}
    req = urllib.request.Request(p.api + "/v1/chat/completions", data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        data: dict[str, Any] = json.loads(r.read())
    return data


def test_an_adapter_fetched_by_url_is_served_as_a_model(tmp_path: Path, running: list[Cluster]) -> None:
    data = make_adapter(base_model_file(), tmp_path / "pirate.gguf").read_bytes()
    with release_server(Release(files={"pirate.gguf": data})) as origin:
        model = {"name": "smollm2", "source": SMOLLM2, "engine": "llamacpp", "profile": {"memory": "512Mi"},
                 "scaling": {"min": 1, "max": 1},
                 "adapters": [{"name": ADAPTER, "source": origin.url("pirate.gguf"),
                               "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}]}
        p = plan(tmp_path, [NodePlan(id="cpu01", address=loopback(), kind="cpu", gpus=0,
                                     port_range=engine_ports())],
                 [model], heartbeat_interval="0.5s", reconcile_interval="0.3s")
        c = Cluster(p)
        running.append(c)
        c.start()
        try:
            wait_until(lambda: admin_up(p), 20, "control plane up")
            wait_until(lambda: any(r["state"] == "ready" for r in admin_get(p, "/api/status")["replicas"]), 120,
                       "the replica with its adapter Ready")
            key = admin_post(p, "/api/keys", {"name": "t"})["key"]
            base, tuned = ask(p, key, "smollm2"), ask(p, key, ADAPTER)
            assert (base["model"], tuned["model"]) == ("smollm2", ADAPTER)
            said = [d["choices"][0]["message"]["content"] for d in (base, tuned)]
            assert said[0] != said[1], said
            (line,) = admin_get(p, "/api/status")["adapters"]
            assert line["adapter"] == ADAPTER and len(line["replicas"]) == 1
            assert ADAPTER in ctl(p, "status") and line["replicas"][0] in ctl(p, "status")
            token = p.token_file.read_text().strip()
            req = urllib.request.Request(p.admin + "/metrics", headers={"Authorization": f"Bearer {token}"})
            with urllib.request.urlopen(req, timeout=10) as r:
                assert f'llmgw_adapter_replica{{adapter="{ADAPTER}"'.encode() in r.read()
        except BaseException:
            print(dump_logs(p))
            raise
