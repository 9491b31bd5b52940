"""A key's budget counts what a killed server had journaled and not yet recorded: a real server process, killed
with SIGKILL, started again over its store and journal."""

from __future__ import annotations

import signal
import sqlite3
from pathlib import Path

from bench.addresses import engine_ports, loopback

from llmgw.dev.cluster import Cluster, ClusterPlan, NodePlan, admin_get, admin_post, admin_up
from tests.harness import plan, wait_until
from tests.integration.conftest import dump_logs
from tests.integration.test_usage_integrity import MODEL, chat

REQUESTS = 12


def recorded(p: ClusterPlan, key_id: str) -> tuple[int, int]:
    """(requests, tokens) the store holds for the key."""
    with sqlite3.connect(p.workdir / "state" / "llmgw.db") as db:
        n, tokens = db.execute("SELECT COUNT(*), COALESCE(SUM(prompt_tokens + completion_tokens), 0) FROM usage "
                               "WHERE key_id = ?", (key_id,)).fetchone()
        return int(n), int(tokens)


def budget_used(p: ClusterPlan, key_id: str) -> int:
    (row,) = [k for k in admin_get(p, "/api/keys") if k["id"] == key_id]
    return int(row["use"]["budget_used"])


def test_a_budget_counts_what_a_killed_server_had_only_journaled(tmp_path: Path, running: list[Cluster]) -> None:
    """Usage is flushed every 60 s here, so every request served before the kill is in the journal only. Started
    again, the server records them from the journal; the key's budget must count them at once, not after a
    second restart."""
    p = plan(tmp_path, [NodePlan(id="node01", address=loopback(), port_range=engine_ports())], [MODEL],
             heartbeat_interval="0.3s", reconcile_interval="0.2s",
             extra_server={"router": {"usage_flush_interval": "60s"}})
    c = Cluster(p)
    c.start()
    running.append(c)
    try:
        wait_until(lambda: admin_up(p), 20, "control plane up")
        wait_until(lambda: any(r["state"] == "ready" for r in admin_get(p, "/api/status")["replicas"]), 30,
                   "m ready")
        made = admin_post(p, "/api/keys", {"name": "billing", "limits": {"budget": 10**9, "budget_period": "day"}})
        key, key_id = made["key"], made["id"]
        assert [chat(p, key)[0] for _ in range(REQUESTS)] == [200] * REQUESTS
        assert recorded(p, key_id) == (0, 0)  # in the journal only
        c.stop_process("server", signal.SIGKILL)
        c.start_server()
        wait_until(lambda: admin_up(p), 20, "control plane up again")
        _, tokens = wait_until(lambda: (r := recorded(p, key_id))[0] == REQUESTS and r, 90, "journal replayed")
        assert tokens > 0
        assert budget_used(p, key_id) == tokens
    except BaseException:
        print(dump_logs(p))
        raise
