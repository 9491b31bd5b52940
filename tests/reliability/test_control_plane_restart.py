"""Check 3: the control plane killed (SIGKILL) and started again while its replicas serve: no node declared lost,
no engine restarted, the replicas adopted with their shard counts, and requests resume; how many failed while it
was down is measured (the router is in the control plane's process: with one server, requests sent while it is
down fail; several servers keep serving, docs/ha.md)."""

from __future__ import annotations

import json
import signal
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from bench.addresses import engine_ports, loopback

from llmgw.dev.cluster import Cluster, ClusterPlan, NodePlan, admin_get, admin_post, admin_up
from tests.harness import holds_for, plan, wait_until
from tests.integration.conftest import dump_logs
from tests.reliability.figures import record

LOST_AFTER = 4.0
MODEL = {"name": "m", "source": "org/m", "engine": "sim", "profile": {"gpus_per_shard": 1, "sim": {"tokens": 2}},
         "scaling": {"min": 2, "max": 2}}


def shards(p: ClusterPlan) -> dict[str, tuple[int, int]]:
    """replica id -> (engine pid, shards the replica expects)"""
    expected = {r["id"]: r["shards_expected"] for r in admin_get(p, "/api/replicas")}
    return {s["replica_id"]: (s["pid"], expected.get(s["replica_id"], 0)) for n in admin_get(p, "/api/nodes")
            for s in admin_get(p, f"/api/nodes/{n['node']}")["report"]["shards"] if s["pid"]}


def test_a_killed_control_plane_comes_back_to_the_same_replicas_and_requests_resume(
    tmp_path: Path, running: list[Cluster]
) -> None:
    nodes = [NodePlan(id=f"k{i}", address=loopback(), gpus=1,
                      port_range=engine_ports()) for i in range(3)]
    p = plan(tmp_path, nodes, [MODEL], heartbeat_interval="0.3s", reconcile_interval="0.2s",
             node_lost_after=f"{LOST_AFTER}s")
    c = Cluster(p)
    running.append(c)
    c.start()
    outcomes: list[tuple[float, bool]] = []
    stop = threading.Event()
    try:
        wait_until(lambda: admin_up(p), 20, "control plane up")
        wait_until(lambda: sum(r["state"] == "ready" for r in admin_get(p, "/api/status")["replicas"]) == 2, 30,
                   "two replicas ready")
        key = admin_post(p, "/api/keys", {"name": "t"})["key"]
        before = shards(p)
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()

        def traffic() -> None:
            while not stop.is_set():
                req = urllib.request.Request(p.api + "/v1/chat/completions", data=body, headers={
                    "Authorization": f"Bearer {key}", "Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(req, timeout=5) as r:
                        outcomes.append((time.monotonic(), r.status == 200))
                except (urllib.error.URLError, OSError):
                    outcomes.append((time.monotonic(), False))
                    stop.wait(0.05)  # a refused connection returns at once: do not spin

        t = threading.Thread(target=traffic, daemon=True)
        t.start()
        wait_until(lambda: sum(ok for _, ok in outcomes) >= 20, 20, "traffic flowing")
        killed_at = time.monotonic()
        c.stop_process("server", signal.SIGKILL)
        c.start_server()
        wait_until(lambda: admin_up(p), 20, "control plane back")
        back_at = time.monotonic()
        wait_until(lambda: [ok for at, ok in outcomes if at > back_at][-20:] == [True] * 20, 30,
                   "requests answered again")
        resumed_at = next(at for at, ok in outcomes if at > killed_at and ok)
        failed = sum(not ok for at, ok in outcomes if at >= killed_at)
        holds_for(lambda: all(n["state"] == "live" for n in admin_get(p, "/api/nodes")), LOST_AFTER + 1,
                  "every node live")
        assert shards(p) == before, "an engine was restarted, or a replica adopted with another shard count"
        said = [e["message"] for e in admin_get(p, "/api/events")]
        assert not any(" lost: " in e for e in said), said
        record("control-plane restart: requests failed while it was down (one server)", failed,
               f"a client loop of sequential requests; back in {back_at - killed_at:.1f}s")
        record("control-plane restart: time from the kill to the first request answered (s)",
               resumed_at - killed_at, "SIGKILL, then started again at once; SQLite store")
    except BaseException:
        print(dump_logs(p))
        raise
    finally:
        stop.set()
        c.stop()
