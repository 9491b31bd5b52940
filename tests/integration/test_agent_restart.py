"""A restarted agent adopts the engines its predecessor left running (killed, or handing over for an upgrade),
models named org/model included, instead of failing and re-creating every replica on its node."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
from pathlib import Path

from bench.addresses import engine_ports, loopback

from llmgw.dev.cluster import Cluster, ClusterPlan, NodePlan, admin_get, admin_up
from tests.harness import plan, wait_until
from tests.integration.conftest import dump_logs

MODELS = [
    {"name": "org/model", "source": "org/model", "engine": "sim", "profile": {"gpus_per_shard": 1},
     "scaling": {"min": 1, "max": 1}},
    {"name": "plain", "source": "org/plain", "engine": "sim", "profile": {"gpus_per_shard": 1},
     "scaling": {"min": 1, "max": 1}},
]


def ready(p: ClusterPlan) -> dict[str, str]:
    return {r["id"]: r["model"] for r in admin_get(p, "/api/status")["replicas"] if r["state"] == "ready"}


def engines(p: ClusterPlan) -> dict[str, int]:
    shards = admin_get(p, "/api/nodes/node01")["report"]["shards"]
    return {s["replica_id"]: s["pid"] for s in shards if s["pid"] and s["state"] == "ready"}


def failures(p: ClusterPlan) -> list[str]:
    with sqlite3.connect(p.workdir / "state" / "llmgw.db") as db:
        said = [json.loads(b)["message"] for (b,) in db.execute("SELECT body FROM events ORDER BY seq")]
    return [e for e in said if " failed" in e or " lost" in e]


def test_a_restarted_agent_adopts_what_runs(tmp_path: Path, running: list[Cluster]) -> None:
    p = plan(tmp_path, [NodePlan(id="node01", address=loopback(), port_range=engine_ports())], MODELS,
             heartbeat_interval="0.3s", reconcile_interval="0.2s", node_lost_after="20s")
    c = Cluster(p)
    running.append(c)
    c.start()
    try:
        wait_until(lambda: admin_up(p), 20, "control plane up")
        before = wait_until(lambda: len(r := ready(p)) == 2 and r, 30, "both models ready")
        pids = wait_until(lambda: len(e := engines(p)) == 2 and e, 10, "both engines reported")

        for how in ("killed", "handing over"):
            if how == "killed":
                c.stop_process("agent-node01", signal.SIGKILL)
            else:
                agent = c.procs["agent-node01"]
                os.kill(agent.pid, signal.SIGUSR2)
                agent.wait(20)
                c.procs.pop("agent-node01")
            assert all(Path(f"/proc/{pid}").exists() for pid in pids.values()), f"an engine died with the agent ({how})"
            c.start_agent("node01")
            adopted = 2 if how == "killed" else 4
            wait_until(lambda n=adopted: c.log("agent-node01").count("from the previous agent") == n, 20,  # type: ignore[misc]
                       f"the new agent adopting both engines after its predecessor was {how}")
            wait_until(lambda: engines(p) == pids and ready(p) == before, 20, "both still ready, same processes")
        assert failures(p) == []
        assert "Traceback" not in c.log("agent-node01")
    except BaseException:
        print(dump_logs(p))
        raise
    c.stop()  # an agent told to stop stops its engines: nothing outlives the cluster
    wait_until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in pids.values()), 10, "engines stopped")
