"""A node whose hardware probe starts failing (an inventory edited into nonsense, EACCES under /sys) keeps
heartbeating and keeps its shards running, and says why in the probe's own words; fixed, it says so too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.addresses import engine_ports

from llmgw.dev.cluster import Cluster, ClusterPlan, NodePlan, admin_get, admin_up
from tests.harness import holds_for, plan, wait_until
from tests.integration.conftest import dump_logs

MODEL = {"name": "m", "source": "org/m", "engine": "sim", "profile": {"gpus_per_shard": 1, "gpu_class": "A100-80G"},
         "scaling": {"min": 1, "max": 1}}
LOST_AFTER = 3.0


def _node(p: ClusterPlan, node_id: str) -> dict[str, Any]:
    found: dict[str, Any] = next(n for n in admin_get(p, "/api/nodes") if n["node"] == node_id)
    return found


def _discovered(p: ClusterPlan) -> tuple[str, str, str]:
    c = next(c for c in _node(p, "node01")["conditions"] if c["type"] == "Discovered")
    return c["status"], c["reason"], c["message"]


def _serving(p: ClusterPlan) -> dict[str, int]:
    """Ready replicas on node01 and the pid of their engine, as the node reports it."""
    ready = {r["id"] for r in admin_get(p, "/api/status")["replicas"] if r["state"] == "ready"}
    shards = admin_get(p, "/api/nodes/node01")["report"]["shards"]
    return {s["replica_id"]: s["pid"] for s in shards if s["replica_id"] in ready and s["pid"]}


def test_a_failing_probe_is_a_warning_and_the_shards_keep_running(tmp_path: Path, running: list[Cluster]) -> None:
    # two more nodes, reporting as usual: with one node alone, its silence would be taken for the control plane's
    # own trouble and never declared a loss, and the test could not fail
    nodes = [NodePlan(id=f"node0{i}", address="127.0.0.1", port_range=engine_ports(),
                      gpu_name="NVIDIA A100-SXM4-80GB" if i == 1 else "NVIDIA H100 80GB HBM3") for i in (1, 2, 3)]
    p = plan(tmp_path, nodes, [MODEL],
             heartbeat_interval="0.3s", reconcile_interval="0.2s", node_lost_after=f"{LOST_AFTER:.0f}s")
    c = Cluster(p)
    running.append(c)
    c.start()
    try:
        wait_until(lambda: admin_up(p), 20, "control plane up")
        before = wait_until(lambda: _serving(p) or None, 30, "m ready on node01")
        inventory = tmp_path / "nodes" / "node01" / "root" / "gpu-inventory.yaml"
        good = inventory.read_text()
        inventory.write_text("gpus: [{index: 0, name: H100\n")  # an edit cut short: no longer YAML

        wait_until(lambda: _discovered(p)[:2] == ("False", "DiscoveryFailed"), 10, "the failure reported")
        words = _discovered(p)[2]
        assert "gpu-inventory.yaml" in words, words  # the probe's own words name the file
        holds_for(lambda: _serving(p) == before and _node(p, "node01")["state"] == "live", LOST_AFTER * 2,
                  "the node reports and its shard runs, same process, while its probe fails")

        inventory.write_text(good)
        wait_until(lambda: _discovered(p)[:2] == ("True", "ProbeCompleted"), 10, "the probe works again")
        assert _serving(p) == before
        assert "Traceback" not in c.log("agent-node01")
    except BaseException:
        print(dump_logs(p))
        raise
