"""A control plane that stalls for longer than node_lost_after (here: SIGSTOP) declares no node lost and restarts
no engine, though while it was stopped every timer ran out: the agents kept heartbeating, and the fault was its own."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from pathlib import Path

from bench.addresses import engine_ports, loopback

from llmgw.dev.cluster import Cluster, ClusterPlan, NodePlan, admin_get, admin_up
from tests.harness import holds_for, plan, wait_until
from tests.integration.conftest import dump_logs

LOST_AFTER = 2.5
MODEL = {"name": "m", "source": "org/m", "engine": "sim", "profile": {"gpus_per_shard": 1},
         "scaling": {"min": 3, "max": 3}}


def shard_pids(p: ClusterPlan) -> set[int]:
    return {s["pid"] for n in admin_get(p, "/api/nodes") for s in admin_get(p, f"/api/nodes/{n['node']}")["report"]
            ["shards"] if s["pid"]}


def events(p: ClusterPlan) -> list[str]:
    with sqlite3.connect(p.workdir / "state" / "llmgw.db") as db:
        return [json.loads(b)["message"] for (b,) in db.execute("SELECT body FROM events ORDER BY seq")]


def test_a_stopped_control_plane_declares_nobody_lost_when_it_resumes(tmp_path: Path, running: list[Cluster]) -> None:
    nodes = [NodePlan(id=f"node0{i}", address=loopback(), port_range=engine_ports())
             for i in range(1, 4)]
    p = plan(tmp_path, nodes, [MODEL], heartbeat_interval="0.3s", reconcile_interval="0.2s",
             node_lost_after=f"{LOST_AFTER}s")
    c = Cluster(p)
    running.append(c)
    c.start()
    try:
        wait_until(lambda: admin_up(p), 20, "control plane up")
        wait_until(lambda: sum(r["state"] == "ready" for r in admin_get(p, "/api/status")["replicas"]) == 3, 30,
                   "three replicas ready")
        before = shard_pids(p)
        server = c.procs["server"]
        os.kill(server.pid, signal.SIGSTOP)
        try:
            time.sleep(LOST_AFTER * 2)  # the fault under test: the control plane not running for this long
        finally:
            os.kill(server.pid, signal.SIGCONT)
        wait_until(lambda: admin_up(p), 10, "control plane answering again")
        # long enough for a wrongly started timer to run out
        holds_for(lambda: all(r["state"] == "live" for r in admin_get(p, "/api/nodes")), LOST_AFTER + 2,
                  "every node live")
        status = admin_get(p, "/api/status")
        assert [r["state"] for r in status["replicas"]] == ["ready"] * 3
        assert shard_pids(p) == before, "an engine was restarted"
        said = events(p)
        assert not any(" lost: " in e for e in said) and any("stalled for" in e for e in said), said
    except BaseException:
        print(dump_logs(p))
        raise
