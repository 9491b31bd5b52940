"""A GPU build proven on its GPUs, end to end: a node whose driver runs llama.cpp's CUDA 13 build reports the
build ready, but the driver's per-process accounting (the simulated node's stand-in for NVML, beside its
inventory) shows its processes holding nothing on the GPU they were given, as a build that computes on the CPU
would. The shard fails with GPUUnused in those words, and the node passes over to the next build, and the next,
each stated with the reason; with only the CPU build left, the model that asks for a GPU waits with NoGPUBuild.
Real processes: a control plane, an agent on a simulated host, a release server on loopback, the real llama-server
packed under each build's name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.addresses import engine_ports, loopback

from llmgw.agent.discovery.gpu_use import STANDIN
from llmgw.dev.cluster import SMOLLM2, Cluster, NodePlan, admin_get, admin_up
from tests.agent.installs.archives import llama_archive
from tests.agent.installs.release import Release, release_server
from tests.harness import plan, wait_until
from tests.integration.conftest import dump_logs
from tests.integration.test_engine_install import ctl_json
from tests.integration.test_gpu_nodes_take_gpu_builds import VERSION, _source

GPU_BUILDS = ["cuda13-x86_64", "cuda12-x86_64", "vulkan-x86_64"]


def test_a_build_that_holds_nothing_on_its_gpu_fails_and_the_node_takes_the_next(
    tmp_path: Path, running: list[Cluster]
) -> None:
    with release_server(Release()) as rel:
        source = _source(rel, llama_archive(VERSION))
        model = {"name": "on-gpu", "source": SMOLLM2, "engine": "llamacpp",
                 "profile": {"gpus_per_shard": 1, "memory": "256Mi"}, "scaling": {"min": 1, "max": 1}}
        node = NodePlan(id="h100", address=loopback(), gpus=1, port_range=engine_ports(),
                        agent_extra={"probe_engines": ["sim", "llamacpp"]}, driver="580.95.05", cuda="13.0",
                        glibc="2.39")
        p = plan(tmp_path, [node], [model], heartbeat_interval="0.5s", reconcile_interval="0.3s",
                 extra_server={"engines": ["sim", source]})
        # the driver's accounting: nothing holds memory on this node's GPU, whatever llama-server says of itself
        (inventory,) = (tmp_path / "nodes" / "h100").rglob("gpu-inventory.yaml")
        (inventory.parent / STANDIN).write_text("")
        c = Cluster(p)
        running.append(c)
        c.start()
        try:
            wait_until(lambda: admin_up(p), 20, "control plane up")

            def fallen_back() -> dict[str, Any] | None:
                rows = {r["node"]: r for r in ctl_json(p, "nodes")}
                builds = rows.get("h100", {}).get("engine_builds", [])
                e = next((b for b in builds if b["name"] == "llamacpp"), None)
                return e if e and e["variant"] == "cpu-x86_64" and e["runs"] else None

            built = wait_until(fallen_back, 240, "h100 passing over every GPU build it was seen idle on")
            assert [(o["variant"], o["reason"]) for o in built["passed_over"]] == [
                (v, "GPUUnused") for v in GPU_BUILDS], built
            for o in built["passed_over"]:
                assert o["message"] == (f"{o['variant']} ready, but its processes hold no memory on GPU 0 (0 MiB) "
                                        f"of the 1 it was given (stand-in {STANDIN})"), o

            # each replica that ran on an idle build failed with the reason, in the node's words
            events = [e["message"] for e in admin_get(p, "/api/events?limit=500")]
            failed = [e for e in events if "GPUUnused" in e or "hold no memory on GPU 0" in e]
            assert len(failed) >= len(GPU_BUILDS), events

            def waiting() -> dict[str, Any] | None:
                told = [r["placement"] for r in admin_get(p, "/api/explain/on-gpu")["replicas"]
                        if r["phase"] == "pending" and r.get("placement")]
                return told[0] if told and told[0].get("filtered") == {"NoGPUBuild": 1} else None

            (verdict,) = wait_until(waiting, 30, "on-gpu waiting for a GPU build")["verdicts"]
            assert "is the CPU build cpu-x86_64, which uses no GPU" in verdict["message"], verdict
            assert "cuda13-x86_64 passed over (GPUUnused)" in verdict["message"], verdict
        except BaseException:
            print(dump_logs(p))
            raise
