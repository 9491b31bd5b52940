"""Nodes with an NVIDIA driver take a GPU build of llama.cpp by default, the newest CUDA their driver runs, and state
every build they pass over with its reason on `ctl nodes`, the management API and the dashboard: a driver too old,
a C library too old (the CPU build then, said as a fallback), no build for the processor. Real processes: a control
plane, four agents on simulated hosts (the inventory stands in for NVML, the host root for the machine), a release
server on loopback, and the real llama-server packed under each build's name."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from bench.addresses import engine_ports, loopback

from llmgw.dev.cluster import Cluster, NodePlan, admin_up
from tests.agent.installs.archives import llama_archive, sha256
from tests.agent.installs.release import Release, release_server
from tests.harness import plan, wait_until
from tests.integration.test_engine_install import ctl_json

VERSION = "b9"
DRIVER_580 = {"driver": "580.95.05", "cuda": "13.0", "glibc": "2.39"}
NODES: dict[str, dict[str, str]] = {
    "h100": DRIVER_580,
    "a100-550": {"driver": "550.54.15", "cuda": "12.4", "glibc": "2.39"},
    "jammy": {**DRIVER_580, "glibc": "2.35"},
    "gh200": {**DRIVER_580, "arch": "aarch64"},
}


def _source(rel: Release, data: bytes) -> dict[str, Any]:
    names = {"cuda13-x86_64": "cuda-13.3-x64", "cuda12-x86_64": "cuda-12.8-x64", "vulkan-x86_64": "vulkan-x64",
             "cpu-x86_64": "x64"}
    variants = []
    for variant, tail in names.items():
        archive = f"llama-{VERSION}-bin-ubuntu-{tail}.tar.gz"
        rel.files[archive] = data
        v: dict[str, Any] = {"variant": variant, "url": rel.url(archive), "sha256": sha256(data)}
        if variant.startswith("cuda"):
            v["cuda"] = tail.split("-")[1]
        if variant != "cpu-x86_64":
            v["glibc"] = "2.39"
        variants.append(v)
    return {"name": "llamacpp", "version": VERSION, "variants": variants}


def _ctl_text(p: Any) -> str:
    r = subprocess.run([sys.executable, "-m", "llmgw.cli.main", "ctl", "nodes", "--admin", p.admin],
                       capture_output=True, text=True, timeout=30,
                       env={**os.environ, "COLUMNS": "400", "LLMGW_ADMIN_TOKEN_FILE": str(p.token_file)})
    assert r.returncode == 0, r.stderr
    return r.stdout


def _dashboard(p: Any) -> str:
    auth = {"Authorization": f"Bearer {p.token_file.read_text().strip()}"}
    with urllib.request.urlopen(urllib.request.Request(p.admin + "/admin/view", headers=auth), timeout=5) as r:
        return str(r.read().decode())


def test_gpu_nodes_take_gpu_builds_and_state_every_fallback(tmp_path: Path, running: list[Cluster]) -> None:
    data = llama_archive(VERSION)
    with release_server(Release()) as rel:
        source = _source(rel, data)
        nodes = [NodePlan(id=name, address=loopback(), gpus=1, port_range=engine_ports(),
                          agent_extra={"probe_engines": ["sim", "llamacpp"]},
                          driver=h["driver"], cuda=h["cuda"], glibc=h["glibc"], arch=h.get("arch", ""))
                 for i, (name, h) in enumerate(NODES.items())]
        p = plan(tmp_path, nodes, [], heartbeat_interval="0.5s", reconcile_interval="0.3s",
                 extra_server={"engines": ["sim", source]})
        c = Cluster(p)
        running.append(c)
        c.start()
        wait_until(lambda: admin_up(p), 20, "control plane up")

        def settled() -> dict[str, dict[str, Any]] | None:
            rows = {r["node"]: r for r in ctl_json(p, "nodes")}
            done = all(any(e["name"] == "llamacpp" and (e["runs"] or e["reason"] == "NoBuildForNode")
                           for e in rows.get(n, {}).get("engine_builds", [])) for n in NODES)
            return rows if done else None

        rows = wait_until(settled, 120, "every node installed its build of llama.cpp, or said why it has none")
        built = {n: next(e for e in rows[n]["engine_builds"] if e["name"] == "llamacpp") for n in NODES}

        # the newest CUDA the driver runs, nothing passed over
        assert (built["h100"]["variant"], built["h100"]["runs"], built["h100"]["passed_over"]) == (
            "cuda13-x86_64", True, [])
        assert f"/llamacpp/{VERSION}-cuda13-x86_64/" in built["h100"]["path"]
        assert "cuda13-x86_64" in rows["h100"]["engines"]  # the build beside the version the binary gives
        # a 550 driver runs CUDA 12, not 13: both versions said
        assert built["a100-550"]["variant"] == "cuda12-x86_64" and built["a100-550"]["runs"]
        [over] = built["a100-550"]["passed_over"]
        assert (over["variant"], over["reason"]) == ("cuda13-x86_64", "DriverTooOld")
        assert "580 or newer" in over["message"] and "550.54.15 (CUDA 12.4)" in over["message"]
        # glibc 2.35 (Ubuntu 22.04): no GPU build starts; the CPU build, said to be a fallback
        assert built["jammy"]["variant"] == "cpu-x86_64" and built["jammy"]["runs"]
        assert [(o["variant"], o["reason"]) for o in built["jammy"]["passed_over"]] == [
            ("cuda13-x86_64", "LibcTooOld"), ("cuda12-x86_64", "LibcTooOld"), ("vulkan-x86_64", "LibcTooOld")]
        assert "the CPU build cpu-x86_64 is used (a fallback)" in built["jammy"]["message"]
        # an arm64 node with a driver: no build at all for its processor
        assert (built["gh200"]["runs"], built["gh200"]["reason"]) == (False, "NoBuildForNode")
        assert built["gh200"]["passed_over"][0]["reason"] == "NoBuildForProcessor"

        # the same words, with their codes, in the table an operator reads and on the dashboard
        words = [
            "llamacpp: cuda13-x86_64 passed over (DriverTooOld): cuda13-x86_64 is built with CUDA 13.3",
            "llamacpp: vulkan-x86_64 passed over (LibcTooOld): vulkan-x86_64 needs glibc 2.39 (Ubuntu "
            "24.04) or newer",
            f"llamacpp: gpu-arm64 passed over (NoBuildForProcessor): llamacpp {VERSION} has no GPU build "
            "for arm64",
        ]
        for w in words:
            assert any(x.startswith(w) for r in rows.values() for x in r["warnings"]), (w, rows)
        table = " ".join(_ctl_text(p).split())
        page = _dashboard(p)
        for w in [*words, "the CPU build cpu-x86_64 is used (a fallback)"]:
            assert " ".join(w.split()) in table, (w, table)
            assert w.split(":")[-1].strip()[:40] in page, (w, page)
