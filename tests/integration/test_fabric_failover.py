"""Two fabrics, two-node replicas, one node lost; no replica ever spans two fabrics."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from bench.addresses import engine_ports, loopback

from llmgw.dev.cluster import Cluster, ClusterPlan, NodePlan, admin_get, admin_post, admin_up
from tests.harness import plan, wait_until
from tests.integration.conftest import dump_logs
from tests.integration.netstate import listening_ports

LOST_AFTER = 6.0
HEARTBEAT = 0.5
MODEL = {
    "name": "big", "source": "org/big-405b", "engine": "sim",
    "profile": {"gpus_per_shard": 4, "nodes": 2, "gpu_class": "H100-80G", "sim": {"tokens": 4}},
    "scaling": {"min": 2, "max": 2},
}
FABRIC = {"node01": "ib-a", "node02": "ib-a", "node03": "ib-b", "node04": "ib-b"}


def nodes() -> list[NodePlan]:
    return [
        NodePlan(id=n, address=loopback(), fabric=f, adapters={"mlx5_0": "ACTIVE", "mlx5_1": "ACTIVE"},
                 port_range=engine_ports())
        for i, (n, f) in enumerate(FABRIC.items())
    ]


def post_chat(url: str, key: str | None = None) -> dict[str, Any]:
    body = {"model": "big", "messages": [{"role": "user", "content": "hi"}]}
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {key}"} if key else {})
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(), headers=headers)
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


def replica_secret(p: ClusterPlan, replica_id: str) -> str:
    """Read from the control plane's own store: no API hands a replica's secret out."""
    with sqlite3.connect(p.workdir / "state" / "llmgw.db") as db:
        (body,) = db.execute("SELECT body FROM replicas WHERE id = ?", (replica_id,)).fetchone()
    return str(json.loads(body)["secret"])


def test_replicas_stay_on_one_fabric_through_node_loss(tmp_path: Path, running: list[Cluster]) -> None:
    p = plan(tmp_path, nodes(), [MODEL], heartbeat_interval=f"{HEARTBEAT}s", node_lost_after=f"{LOST_AFTER}s",
             reconcile_interval="0.3s")
    c = Cluster(p)
    running.append(c)
    c.start()
    pairings: list[set[str]] = []

    def replicas() -> list[dict[str, Any]]:
        reps = admin_get(p, "/api/replicas")
        pairings.extend({a["node_id"] for a in r["assignments"]} for r in reps if r["assignments"])
        return reps  # type: ignore[no-any-return]

    try:
        wait_until(lambda: admin_up(p), 20, "control plane up")

        def two_ready() -> list[dict[str, Any]] | None:
            ready = [r for r in admin_get(p, "/api/status")["replicas"] if r["state"] == "ready"]
            return ready if len(ready) == 2 else None

        ready = wait_until(two_ready, 60, "two ready replicas")
        replicas()
        by_fabric = {FABRIC[r["nodes"][0]]: r for r in ready}
        assert set(by_fabric) == {"ib-a", "ib-b"}
        assert {frozenset(r["nodes"]) for r in ready} == {frozenset({"node01", "node02"}),
                                                          frozenset({"node03", "node04"})}

        key = admin_post(p, "/api/keys", {"name": "t"})["key"]
        for r in ready:  # each replica's leader serves the router (its secret) and nobody else, and the router serves
            with pytest.raises(urllib.error.HTTPError) as refused:
                post_chat(r["endpoint"])
            assert refused.value.code == 401
            assert post_chat(r["endpoint"], replica_secret(p, r["id"]))["choices"][0]["message"]["content"]
        assert post_chat(p.api, key)["usage"]["completion_tokens"] == 4

        addresses = {n.id: n.address for n in p.nodes}
        ranges = {n.id: range(int(n.port_range.split("-")[0]), int(n.port_range.split("-")[1]) + 1) for n in p.nodes}
        for r in admin_get(p, "/api/replicas"):
            leader, worker = (a["node_id"] for a in sorted(r["assignments"], key=lambda a: a["rank"]))
            # engines bind in the node's port range; the agent's own peer listener (weights) is not the engine's
            served = {x for x in listening_ports(addresses[worker]) if x in ranges[worker]}
            assert served == set(), f"worker {worker}'s engine must serve nothing"
            assert r["assignments"][0]["serve_port"] in listening_ports(addresses[leader])

        # kill node02's agent and its engines, as a dead machine would
        shards = admin_get(p, "/api/nodes/node02")["report"]["shards"]
        assert shards and all(s["pid"] for s in shards)
        c.stop_process("agent-node02", signal.SIGKILL)
        for s in shards:
            os.killpg(s["pid"], signal.SIGKILL)
        killed = time.monotonic()
        ib_a = by_fabric["ib-a"]["id"]

        def ib_a_failed() -> bool:
            row = next((r for r in replicas() if r["id"] == ib_a), None)
            return row is None or bool(row["failed"])

        # its leader's engine exits at once (its peer is gone): the replica fails then, not at node02's timer
        wait_until(ib_a_failed, LOST_AFTER / 2, "the broken two-node replica failed before node02's timer ran out")

        def node02_lost() -> bool:
            return bool(next(n for n in admin_get(p, "/api/nodes") if n["node"] == "node02")["state"] == "lost")

        wait_until(node02_lost, LOST_AFTER + HEARTBEAT + 3, "node02 declared lost")
        lost_at = time.monotonic() - killed
        assert lost_at >= LOST_AFTER - 1, "declared lost before it had been silent long enough"
        def ib_a_released() -> bool:  # kept on view for failed_kept_for, holding no node once its shards are gone
            row = next((r for r in replicas() if r["id"] == ib_a), None)
            return row is None or bool(row["failed"] and row["released"])

        wait_until(ib_a_released, 20, "ib-a replica failed, its shards gone")

        def replacement_waits() -> dict[str, Any] | None:
            pending = [r for r in replicas() if not r["assignments"] and r["explanation"]]
            return pending[0] if pending else None

        waiting = wait_until(replacement_waits, 20, "a replacement with a standing explanation")
        shortfalls = waiting["explanation"]["shortfalls"]
        assert {"fabric": "ib-a", "fit": 1, "need": 2} in shortfalls
        filtered = waiting["explanation"]["filtered"]
        assert any(s["fabric"] == "ib-b" for s in shortfalls) or filtered.get("NodeNotWhole") == 2
        ctl = [sys.executable, "-m", "llmgw.cli.main", "ctl", "explain", "big", "--admin", p.admin]
        env = {**os.environ, "LLMGW_ADMIN_TOKEN_FILE": str(p.token_file)}
        told = json.loads(subprocess.run([*ctl, "--json"], capture_output=True, text=True, timeout=30, env=env).stdout)
        waiting_one = next(r for r in told["replicas"] if r["phase"] == "pending")
        assert waiting_one["placement"]["filtered"]["NodeNotReady"] == 1
        out = subprocess.run(ctl, capture_output=True, text=True, timeout=30, env=env).stdout
        assert "not placed" in out  # and ctl words it for people

        # the surviving ib-b replica still serves, and node01 was never paired across fabrics
        assert post_chat(p.api, key)["choices"]
        for nodeset in pairings:
            assert len({FABRIC[n] for n in nodeset}) == 1, f"replica spanned fabrics: {nodeset}"
        events = " | ".join(e["message"] for e in admin_get(p, "/api/events?limit=200"))
        assert "node node02 lost" in events and f"replica {ib_a} of big failed" in events
        # the failure names the node that went (its worker's), not only the leader whose engine exited after it
        failed_line = next(e["message"] for e in admin_get(p, "/api/events?limit=200")
                           if e["message"].startswith(f"replica {ib_a} of big failed"))
        assert "worker rank 1 on node02 disconnected" in failed_line, failed_line
    except BaseException:
        print(dump_logs(p))
        raise
