"""A model that asks for a GPU, on a node whose only build of its engine is the CPU one (an NVIDIA driver, and a C
library too old for every GPU archive), stays pending with NoGPUBuild and the node's own words (its build, each
better build it passed over and why) on `ctl explain`, the management API and the dashboard: it is never started
there to hold the GPU and compute on the CPU. A model that asks for no GPU is served by the same build. Real
processes: a control plane, an agent on a simulated host, a release server on loopback, the real llama-server."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from bench.addresses import engine_ports, loopback

from llmgw.dev.cluster import SMOLLM2, Cluster, NodePlan, admin_get, admin_post, admin_up
from tests.agent.installs.archives import llama_archive
from tests.agent.installs.release import Release, release_server
from tests.harness import plan, wait_until
from tests.integration.conftest import dump_logs
from tests.integration.test_gpu_nodes_take_gpu_builds import VERSION, _source
from tests.integration.test_walking_skeleton import chat


def test_a_gpu_model_waits_with_the_reason_while_the_node_has_only_a_cpu_build(
    tmp_path: Path, running: list[Cluster]
) -> None:
    with release_server(Release()) as rel:
        source = _source(rel, llama_archive(VERSION))
        models = [
            {"name": "on-gpu", "source": SMOLLM2, "engine": "llamacpp",
             "profile": {"gpus_per_shard": 1, "memory": "256Mi"}, "scaling": {"min": 1, "max": 1}},
            {"name": "on-cpu", "source": SMOLLM2, "engine": "llamacpp",
             "profile": {"gpus_per_shard": 0, "memory": "256Mi"}, "scaling": {"min": 1, "max": 1}},
        ]
        # glibc 2.35 (Ubuntu 22.04) beside a 580 driver: every GPU archive needs 2.39, so the CPU build it is
        node = NodePlan(id="jammy", address=loopback(), gpus=1, port_range=engine_ports(),
                        agent_extra={"probe_engines": ["sim", "llamacpp"]}, driver="580.95.05", cuda="13.0",
                        glibc="2.35")
        p = plan(tmp_path, [node], models, heartbeat_interval="0.5s", reconcile_interval="0.3s",
                 extra_server={"engines": ["sim", source]})
        c = Cluster(p)
        running.append(c)
        c.start()
        try:
            wait_until(lambda: admin_up(p), 20, "control plane up")

            def ready() -> set[str]:
                return {r["model"] for r in admin_get(p, "/api/status")["replicas"] if r["state"] == "ready"}

            wait_until(lambda: "on-cpu" in ready(), 120, "the CPU model served by the CPU build")

            def refused() -> dict[str, Any] | None:
                (replica,) = admin_get(p, "/api/explain/on-gpu")["replicas"]
                placement: dict[str, Any] | None = replica.get("placement")
                return placement if placement and placement.get("filtered") == {"NoGPUBuild": 1} else None

            placement = wait_until(refused, 30, "on-gpu refused for the CPU build, in the API")
            (verdict,) = placement["verdicts"]
            words = verdict["message"]
            assert verdict["node_id"] == "jammy", verdict
            # the version is the one the node's build gives of itself (llama-server --version)
            assert re.match(r"its llamacpp \S+ is the CPU build cpu-x86_64, which uses no GPU \(", words), words
            assert "cuda13-x86_64 passed over (LibcTooOld)" in words and "glibc 2.35 (Ubuntu 22.04)" in words, words
            assert words.endswith("the model asks for 1 GPU(s) per shard"), words
            assert "on-gpu" not in ready()
            assert not [s for s in admin_get(p, "/api/nodes/jammy")["report"]["shards"]
                        if s["replica_id"].startswith("on-gpu-")], "nothing started for it"

            ctl = subprocess.run([sys.executable, "-m", "llmgw.cli.main", "ctl", "explain", "on-gpu", "--admin",
                                  p.admin], capture_output=True, text=True, timeout=30,
                                 env={**os.environ, "COLUMNS": "300", "LLMGW_ADMIN_TOKEN_FILE": str(p.token_file)})
            assert ctl.returncode == 0, ctl.stderr
            assert "NoGPUBuild: 1 node excluded" in ctl.stdout, ctl.stdout
            assert "jammy: its llamacpp" in ctl.stdout and "which uses no GPU" in ctl.stdout, ctl.stdout

            auth = {"Authorization": f"Bearer {p.token_file.read_text().strip()}"}
            with urllib.request.urlopen(urllib.request.Request(p.admin + "/admin/view", headers=auth),
                                        timeout=5) as r:
                page = r.read().decode()
            assert "NoGPUBuild" in page and "which uses no GPU" in page, page[-3000:]

            key = admin_post(p, "/api/keys", {"name": "t"})["key"]
            status, body = chat(p, key, "on-cpu")
            assert status == 200 and json.loads(body)["choices"][0]["message"]["content"].strip()
        except BaseException:
            print(dump_logs(p))
            raise
