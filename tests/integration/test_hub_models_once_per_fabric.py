"""A model named by a hub id, placed on three nodes of one fabric: the control plane resolves it to one commit, one
node fetches the directory from the stand-in hub (a real process), the other two copy it from that node; every
node ends holding the pinned source, and the hub sent each file's bytes once."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from bench.addresses import engine_ports, loopback

from llmgw.control.hub.hub import resolve
from llmgw.dev.cluster import Cluster, NodePlan, admin_get, admin_up
from llmgw.sim.hub_repo import write_sample_model
from llmgw.wire.hub import HubRef
from tests.harness import free_port, plan, wait_until
from tests.integration.conftest import dump_logs
from tests.integration.test_engine_install import ctl_json

REPO = "acme/tiny"
NODES = ("w1", "w2", "w3")


def counters(hub: str, reset: bool = False) -> dict[str, Any]:
    req = urllib.request.Request(f"{hub}/_standin/counters" + ("/reset" if reset else ""),
                                 method="POST" if reset else "GET")
    with urllib.request.urlopen(req, timeout=10) as r:
        got: dict[str, Any] = json.load(r)
        return got


def test_three_nodes_of_a_fabric_fetch_a_hub_model_from_the_hub_once(tmp_path: Path, running: list[Cluster]) -> None:
    model = write_sample_model(tmp_path / "hub-model", shards=3, shard_bytes=3_000_000)
    port = free_port()
    hub = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "llmgw.sim.hub", "--listen", f"127.0.0.1:{port}", "--cdn-port",
                             "-1", "--repo", f"{REPO}={model}"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().startswith("listening on"), "the hub did not start"
        res = resolve(HubRef(REPO, "main"), hub, None, 30.0)  # what the control plane will resolve it to
        counters(hub, reset=True)
        p = plan(
            tmp_path / "cluster",
            [NodePlan(id=n, address=loopback(), fabric="ib-a", adapters={"mlx5_0": "ACTIVE"},
                      port_range=engine_ports()) for n in NODES],
            [{"name": "tiny", "source": f"hf://{REPO}", "engine": "sim",
              "profile": {"gpus_per_shard": 8, "gpu_class": "H100-80G"}, "scaling": {"min": 3, "max": 3}}],
            heartbeat_interval="0.5s",
            reconcile_interval="0.3s",
            extra_server={"hub": {"endpoint": hub}},
        )
        c = Cluster(p)
        running.append(c)
        c.start()
        try:
            wait_until(lambda: admin_up(p), 20, "control plane up")

            def holders() -> set[str]:
                return {r["node"] for r in ctl_json(p, "nodes") if res.source in r["weights"]}

            wait_until(lambda: holders() == set(NODES) or None, 120, f"every node holding {res.source}")

            def all_ready() -> bool:
                reps = [r for r in admin_get(p, "/api/replicas") if r["model"] == "tiny"]
                return len(reps) == 3 and all(r["endpoint"] for r in reps)

            wait_until(all_ready, 60, "three replicas ready")
            sent = counters(hub)
            assert sent["total_bytes"] == res.total_bytes, ("the hub sent each file once", sent, res.total_bytes)
            assert {k.rsplit("/", 1)[-1]: v for k, v in sent["bytes_sent"].items()} == {
                f.path: f.size for f in res.files}, sent["bytes_sent"]
        except BaseException:
            print(dump_logs(p))
            raise
    finally:
        proc.terminate()
        proc.wait(10)
