"""Issue 33 on real vLLM, on this CPU: a LoRA adapter made with peft (.ci/vllm-stage) is served as a model of its
own by the replica of its base model: the node, given vLLM (the `installed_vllm` fixture), starts it with the
adapter (--enable-lora --lora-modules), and through the router the adapter answers otherwise than the base at
temperature 0, under its own name. Slow (minutes); needs LLMGW_VLLM_MODEL and LLMGW_VLLM_ADAPTER from the stage's
cache. `make test-vllm`."""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from bench.addresses import engine_ports, loopback

from llmgw.dev.cluster import Cluster, ClusterPlan, NodePlan, admin_get, admin_post, admin_up
from tests.harness import free_port, plan, wait_until
from tests.integration.conftest import dump_logs
from tests.vllm.test_vllm_real import READY_S, STARTED_S, VARIANT, VERSION, engine_env, model_dir, ready, requirements

pytestmark = pytest.mark.vllm
__all__ = ["engine_env", "model_dir"]  # fixtures, shared with the other vLLM test

ADAPTER = "smollm2-peft"


@pytest.fixture
def adapter_dir() -> Path:
    d = Path(os.environ.get("LLMGW_VLLM_ADAPTER", ""))
    if not d.is_absolute() or not (d / "adapter_config.json").is_file():
        pytest.fail(f"LLMGW_VLLM_ADAPTER={str(d)!r} is not a peft adapter directory: run .ci/vllm-stage")
    return d


def completion(p: ClusterPlan, key: str, model: str) -> dict[str, Any]:
    body = {"model": model, "temperature": 0, "max_tokens": 12,
            "messages": [{"role": "user", "content": "Name one colour."}]}
    req = urllib.request.Request(p.api + "/v1/chat/completions", data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        data: dict[str, Any] = json.loads(r.read())
    return data


def test_vllm_serves_a_peft_adapter_as_a_model_of_its_own(
    tmp_path: Path, model_dir: Path, installed_vllm: Path, adapter_dir: Path, engine_env: None,
    running: list[Cluster],
    capsys: pytest.CaptureFixture[str],
) -> None:
    source = {"name": "vllm", "version": VERSION, "variants": [{"variant": VARIANT, "requirements": requirements()}]}
    model = {"name": "smollm2", "source": str(model_dir), "engine": "vllm",
             "profile": {"args": ["--enforce-eager", "--max-model-len", "2048"]}, "scaling": {"min": 1, "max": 1},
             "adapters": [{"name": ADAPTER, "source": str(adapter_dir)}]}
    p = plan(tmp_path, [NodePlan(id="cpu01", address=loopback(), kind="cpu", gpus=0, port_range=engine_ports(),
                                 agent_extra={"engines": {"vllm": {"path": str(installed_vllm)}},
                                             "probe_engines": ["vllm"], "peer_port": free_port()})],
             [model], heartbeat_interval="1s", reconcile_interval="0.5s", extra_server={"engines": ["sim", source]})
    c = Cluster(p)
    running.append(c)
    c.start_server()
    try:
        wait_until(lambda: admin_up(p), STARTED_S, "control plane up")
        c.start_agent("cpu01")
        wait_until(lambda: ready(p, "smollm2"), READY_S, "the replica with its adapter Ready",
                   interval=1.0)
        key = admin_post(p, "/api/keys", {"name": "t"})["key"]
        base, tuned = completion(p, key, "smollm2"), completion(p, key, ADAPTER)
        assert tuned["model"] == ADAPTER and base["model"] == "smollm2", (base, tuned)
        words = [d["choices"][0]["message"]["content"] for d in (base, tuned)]
        assert words[0] != words[1], words
        adapters = admin_get(p, "/api/status")["adapters"]
        assert [(a["adapter"], a["model"], len(a["replicas"])) for a in adapters] == [(ADAPTER, "smollm2", 1)]
    except BaseException:
        print(dump_logs(p))
        raise
