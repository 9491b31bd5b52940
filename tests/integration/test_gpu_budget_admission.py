"""A key whose GPU time charged passes its GPU budget is refused at the router, and another key is served: a real
server process and simulated node, chargeback's charges written into the server's own SQLite store
(store.put_charges) by this test while it runs."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from bench.addresses import engine_ports, loopback

from llmgw.dev.cluster import Cluster, ClusterPlan, NodePlan, admin_get, admin_post, admin_up
from llmgw.records.chargeback import ChargeRow
from llmgw.store.base import hour_of
from llmgw.store.sqlite import SqliteStore
from tests.harness import plan, wait_until
from tests.integration.conftest import dump_logs
from tests.integration.test_usage_integrity import MODEL


def ask(p: ClusterPlan, key: str) -> tuple[int, dict[str, Any]]:
    """(status, the answer's JSON) of one chat request."""
    req = urllib.request.Request(
        p.api + "/v1/chat/completions",
        data=json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json", "Connection": "close"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def charge(p: ClusterPlan, key_id: str, busy_s: float, idle_s: float) -> None:
    """One chargeback step, as chargeback writes it: this hour's charges for the key, the mark moved on."""
    store = SqliteStore(p.workdir / "state" / "llmgw.db").open()
    try:
        now = time.time()
        row = ChargeRow(hour=hour_of(now), key_id=key_id, model="m", gpu_class="H100", busy_s=busy_s, idle_s=idle_s)
        store.put_charges([row], [], store.charge_mark(), now - 60)
    finally:
        store.close()


def gpu_used(p: ClusterPlan, key_id: str) -> float:
    (row,) = [k for k in admin_get(p, "/api/keys") if k["id"] == key_id]
    return float(row["use"]["gpu_used"])


def test_a_key_over_its_gpu_budget_is_refused_and_another_served(tmp_path: Path, running: list[Cluster]) -> None:
    p = plan(tmp_path, [NodePlan(id="node01", address=loopback(), port_range=engine_ports())], [MODEL],
             heartbeat_interval="0.3s", reconcile_interval="0.2s")
    c = Cluster(p)
    c.start()
    running.append(c)
    try:
        wait_until(lambda: admin_up(p), 20, "control plane up")
        wait_until(lambda: any(r["state"] == "ready" for r in admin_get(p, "/api/status")["replicas"]), 30,
                   "m ready")
        day = {"gpu_budget": 1_000, "budget_period": "day"}
        over = admin_post(p, "/api/keys", {"name": "over", "limits": day})
        within = admin_post(p, "/api/keys", {"name": "within", "limits": day})
        assert ask(p, over["key"])[0] == 200  # nothing charged yet
        charge(p, over["id"], busy_s=700.0, idle_s=400.0)  # idle time kept warm for it counts too
        charge(p, within["id"], busy_s=700.0, idle_s=0.0)
        status, body = wait_until(lambda: (a := ask(p, over["key"]))[0] != 200 and a, 20, "the charges read")
        assert status == 429, body
        assert body["error"]["type"] == body["error"]["code"] == "insufficient_quota"
        assert "GPU budget spent" in body["error"]["message"] and "of 1000 GPU-seconds" in body["error"]["message"]
        assert ask(p, within["key"])[0] == 200
        assert gpu_used(p, over["id"]) >= 1_100.0
        assert 700.0 <= gpu_used(p, within["id"]) < 1_000.0
    except BaseException:
        print(dump_logs(p))
        raise
