"""The whole cluster on PostgreSQL: a server whose store is a real PostgreSQL database reached with a password from
a file, a node, a replica placed and serving, a key, a request, and its usage in the database; and one server per
SQLite file."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from bench.addresses import engine_ports, loopback

from llmgw.config.loader import load
from llmgw.config.server import ServerConfig
from llmgw.control.server import serve
from llmgw.control.storage.writer import BACKOFF_MAX
from llmgw.core.clock import SystemClock
from llmgw.core.errors import StoreError
from llmgw.dev.cluster import Cluster, ClusterPlan, NodePlan, admin_get, admin_post
from llmgw.router.usage_journal import MAX_BACKOFF
from llmgw.store.postgres import RECONNECT_EVERY_S, PostgresStore
from tests.harness import InProcessServer, aget, plan, wait_until
from tests.integration.conftest import dump_logs, start_cluster
from tests.pg import PASSWORD, Postgres

MODEL = {"name": "m", "source": "org/m", "engine": "sim", "profile": {"gpus_per_shard": 1, "sim": {"tokens": 3}},
         "scaling": {"min": 1, "max": 1}}
LOADED_SLACK_S = 10.0  # beyond what the server's intervals allow: a loaded machine's scheduling


def on_postgres(tmp_path: Path, running: list[Cluster], postgres: Postgres, address: str,
                ports: str) -> tuple[ClusterPlan, str, str]:
    """A cluster of one node whose server's store is a fresh PostgreSQL database (the password in a file), with
    model m ready and a key: (plan, key, DSN)."""
    dsn = postgres.fresh_db()
    (tmp_path / "pg.password").write_text(PASSWORD + "\n")
    p = plan(tmp_path, [NodePlan(id="node01", address=address, port_range=ports)], [MODEL],
             heartbeat_interval="0.3s", reconcile_interval="0.2s",
             extra_server={"store": {"kind": "postgres", "dsn": dsn, "password_file": "pg.password",
                                     "path": "state/llmgw.db"}})
    start_cluster(p, running)
    wait_until(lambda: any(r["state"] == "ready" for r in admin_get(p, "/api/status")["replicas"]), 30,
               "model m ready")
    return p, admin_post(p, "/api/keys", {"name": "t"})["key"], dsn


def chat(p: ClusterPlan, key: str) -> int:
    req = urllib.request.Request(p.api + "/v1/chat/completions", headers={
        "Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        data=json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode())
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            assert json.loads(r.read())["usage"]["completion_tokens"] == 3
            return int(r.status)
    except urllib.error.HTTPError as e:
        return e.code


def refusal(p: ClusterPlan, key: str) -> str:
    """The error code of a chat request's answer ("" when it was answered)."""
    req = urllib.request.Request(p.api + "/v1/chat/completions", headers={
        "Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        data=json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode())
    try:
        with urllib.request.urlopen(req, timeout=20):
            return ""
    except urllib.error.HTTPError as e:
        return str(json.loads(e.read())["error"]["code"])


def usage_in(dsn: str) -> int:
    db = PostgresStore(dsn, PASSWORD).open()
    try:
        return db.usage_count()
    finally:
        db.close()


def store_unreachable(p: ClusterPlan) -> float:
    req = urllib.request.Request(p.admin + "/metrics", headers={
        "Authorization": f"Bearer {p.token_file.read_text().strip()}"})
    with urllib.request.urlopen(req, timeout=5) as r:
        text = r.read().decode()
    return float(next(ln.split()[1] for ln in text.splitlines() if ln.startswith("llmgw_store_unreachable_seconds")))


def test_a_cluster_serves_and_bills_on_postgres(tmp_path: Path, running: list[Cluster], postgres: Postgres) -> None:
    p, key, dsn = on_postgres(tmp_path, running, postgres, loopback(), engine_ports())
    try:
        assert chat(p, key) == 200
        db = PostgresStore(dsn, PASSWORD).open()
        try:
            wait_until(lambda: db.usage_count() == 1, 10, "the request's usage in PostgreSQL")
            assert [n.id for n in db.list_nodes()] == ["node01"]
            assert [r.model for r in db.list_replicas()] == ["m"]
            assert [k.name for k in db.list_keys()] == ["t"]
            assert db.usage_totals()[0].completion_tokens == 3
        finally:
            db.close()
        assert not (tmp_path / "state" / "llmgw.db").exists(), "nothing went to a SQLite file"
        logs = "".join(f.read_text(errors="replace") for f in (tmp_path / "logs").glob("*.log"))
        assert PASSWORD not in logs
    except BaseException:
        print(dump_logs(p))
        raise


def test_serving_outlives_a_postgres_outage_and_no_usage_is_lost(tmp_path: Path, running: list[Cluster],
                                                                  postgres: Postgres) -> None:
    """The database stops for 20 s under traffic: requests to the ready replica keep being answered, the metrics
    and /health say the store is unreachable, and when it is back every request's usage lands, once, and the
    server leads again (its lease ran out meanwhile: no placement happened without the store)."""
    p, key, dsn = on_postgres(tmp_path, running, postgres, loopback(), engine_ports())
    try:
        assert chat(p, key) == 200
        postgres.outage()
        try:
            answers = [chat(p, key)]

            def asked_again_and_unreachable() -> bool:  # requests all along, until the metrics say it
                answers.append(chat(p, key))
                return store_unreachable(p) >= 20

            wait_until(asked_again_and_unreachable, 45, "the metrics saying the store has been unreachable for 20 s",
                       interval=0.2)
            assert answers == [200] * len(answers), answers  # serving outlived the store
            with urllib.request.urlopen(p.admin + "/health", timeout=5) as r:
                health = json.loads(r.read())
            assert r.status == 200 and health["status"] == "degraded", health
            assert health["store"]["reachable"] is False and health["store"]["unreachable_seconds"] >= 20
            assert health["leader"]["leading"] is False  # its 15 s lease ran out: it does not place blind
        finally:
            postgres.back()
        # the server's own word that the store answers again: its pool tries the database at least every
        # RECONNECT_EVERY_S, its writer retries at least every BACKOFF_MAX
        wait_until(lambda: store_unreachable(p) == 0, RECONNECT_EVERY_S + BACKOFF_MAX + LOADED_SLACK_S,
                   "the store reachable again in the metrics")
        # then usage lands with the journal's next flush, at most its longest back-off away
        wait_until(lambda: usage_in(dsn) == 1 + len(answers), MAX_BACKOFF + LOADED_SLACK_S,
                   "every request's usage in PostgreSQL")
        assert chat(p, key) == 200
        wait_until(lambda: usage_in(dsn) == 2 + len(answers), 30, "a request after the outage recorded")
        wait_until(lambda: json.loads(urllib.request.urlopen(p.admin + "/health", timeout=5).read())["leader"][
            "leading"], 30, "the server leading again")
    except BaseException:
        print(dump_logs(p))
        raise


async def test_a_second_server_on_the_same_sqlite_file_is_refused(tmp_path: Path) -> None:
    p = plan(tmp_path, [], [])
    async with InProcessServer(p):
        cfg = load(ServerConfig, p.workdir / "server.yaml")
        with pytest.raises(StoreError) as e:
            await asyncio.wait_for(serve(cfg, SystemClock(), asyncio.Event()), 20)
        assert "already uses the SQLite store" in str(e.value) and "store.kind postgres" in str(e.value)
        assert await aget(p, "/api/nodes") == []  # the first one serves on, untouched


def test_a_router_serves_from_what_it_knew_for_the_configured_time_only(tmp_path: Path, running: list[Cluster],
                                                                          postgres: Postgres) -> None:
    """router.serve_stale_for 3s: with the shared store unreachable, requests to the ready replica are answered at
    first, then refused 503 routing_table_stale (engines may have moved meanwhile), /health saying so; answered
    again once the store is back."""
    dsn = postgres.fresh_db()
    (tmp_path / "pg.password").write_text(PASSWORD + "\n")
    p = plan(tmp_path, [NodePlan(id="node01", address=loopback(), port_range=engine_ports())], [MODEL],
             heartbeat_interval="0.3s", reconcile_interval="0.2s",
             extra_server={"store": {"kind": "postgres", "dsn": dsn, "password_file": "pg.password",
                                     "path": "state/llmgw.db"}, "router": {"serve_stale_for": "3s"}})
    start_cluster(p, running)
    try:
        wait_until(lambda: any(r["state"] == "ready" for r in admin_get(p, "/api/status")["replicas"]), 30,
                   "model m ready")
        key = admin_post(p, "/api/keys", {"name": "t"})["key"]
        assert chat(p, key) == 200
        postgres.outage()
        try:
            assert chat(p, key) == 200  # at first, from what it knows
            wait_until(lambda: refusal(p, key) == "routing_table_stale", 20,
                       "requests refused once the table is 3 s unconfirmed")
            with urllib.request.urlopen(p.admin + "/health", timeout=5) as r:
                health = json.loads(r.read())
            assert health["routing"]["refusing"] is True and health["routing"]["stale_seconds"] >= 3, health
        finally:
            postgres.back()
        wait_until(lambda: chat(p, key) == 200, 30, "requests answered again with the store back")
    except BaseException:
        print(dump_logs(p))
        raise
