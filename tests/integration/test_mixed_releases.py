"""An agent and a control plane one release apart work together, in either upgrade order: a node registers, is told
its desired state, and serves its shard. The previous release (wire version 10, before leases) runs from the
vendored archive; the other side is this tree."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench.addresses import engine_ports

from llmgw.dev.cluster import ClusterPlan, NodePlan, admin_get, admin_up
from tests.harness import plan, wait_until
from tests.integration.conftest import dump_logs
from tests.releases import MixedCluster, unpack

MODELS = [{"name": "sim-small", "source": "org/sim-small", "engine": "sim", "profile": {"gpus_per_shard": 1},
           "scaling": {"min": 1, "max": 1}}]


def ready(p: ClusterPlan) -> bool:
    return any(r["state"] == "ready" for r in admin_get(p, "/api/status")["replicas"])


@pytest.mark.parametrize("older", ["server", "agent-node01"], ids=["new-agent-old-control-plane",
                                                                   "old-agent-new-control-plane"])
def test_a_node_serves_across_one_release(tmp_path: Path, older: str) -> None:
    src = unpack(tmp_path / "release")
    p = plan(tmp_path / "cluster", [NodePlan(id="node01", address="127.0.0.1", port_range=engine_ports())], MODELS,
             heartbeat_interval="0.5s", reconcile_interval="0.2s")
    c = MixedCluster(p, src, {older})
    try:
        c.start()
        wait_until(lambda: admin_up(p), 30, "control plane up")
        wait_until(lambda: ready(p), 60, "the node's shard ready")
        node = admin_get(p, "/api/nodes/node01")
        assert node["report"]["version"] == 10 and not node["lost"]  # what the older side reads and writes
        if older == "server":
            assert "reads wire version 10" in c.log("agent-node01")  # said once, as the node's operator reads it
        for name in ("server", "agent-node01"):
            assert "Traceback" not in c.log(name), c.log(name)[-3000:]
    except BaseException:
        print(dump_logs(p))
        raise
    finally:
        c.stop()
