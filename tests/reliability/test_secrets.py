"""Check 10: after a run with keys in use (and a near-miss key refused, and a key revoked), no raw API key, no part
of one past its public prefix, and not the operator token appears in the store's files (WAL and journal included),
the logs, /metrics, any /api/* answer, the dashboard or the events. With a PostgreSQL store, nor does its password,
though the database is cut off for a while so that every path that reports a store failure speaks."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from bench.addresses import engine_ports, loopback

from llmgw.dev.cluster import Cluster, ClusterPlan, NodePlan, admin_get, admin_post, admin_up
from llmgw.router.keys import PREFIX_LEN
from tests.harness import plan, wait_until
from tests.integration.conftest import dump_logs
from tests.pg import PASSWORD, Postgres

MODEL = {"name": "m", "source": "org/m", "engine": "sim", "profile": {"gpus_per_shard": 1, "sim": {"tokens": 2}},
         "scaling": {"min": 1, "max": 1}}


def ask(api: str, key: str, stream: bool = False) -> int:
    body = {"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}]}
    req = urllib.request.Request(api + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            r.read()
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def admin_raw(p: ClusterPlan, path: str, timeout: float = 10) -> bytes:
    token = p.token_file.read_text().strip()
    req = urllib.request.Request(p.admin + path, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return bytes(r.read())


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_no_raw_key_or_operator_token_is_written_or_shown_anywhere(
    tmp_path: Path, running: list[Cluster], store: str, request: pytest.FixtureRequest
) -> None:
    pg: Postgres | None = request.getfixturevalue("postgres") if store == "postgres" else None
    extra = {}
    if pg is not None:
        (tmp_path / "pg.password").write_text(PASSWORD + "\n")
        extra = {"store": {"kind": "postgres", "dsn": pg.fresh_db(), "password_file": "pg.password",
                           "path": "state/llmgw.db"}}
    p = plan(tmp_path, [NodePlan(id="s0", address=loopback(), gpus=1, port_range=engine_ports())], [MODEL],
             heartbeat_interval="0.5s", reconcile_interval="0.2s", extra_server=extra)
    c = Cluster(p)
    running.append(c)
    c.start()
    try:
        wait_until(lambda: admin_up(p), 20, "control plane up")
        wait_until(lambda: [r for r in admin_get(p, "/api/status")["replicas"] if r["state"] == "ready"], 30,
                   "m ready")
        keys = [admin_post(p, "/api/keys", {"name": f"k{i}"})["key"] for i in range(2)]
        for k in keys:
            assert ask(p.api, k) == 200 and ask(p.api, k, stream=True) == 200
        near_miss = keys[0][:-1] + ("A" if keys[0][-1] != "A" else "B")  # a typo of a real key: refused
        assert ask(p.api, near_miss) == 401
        kid = next(k["id"] for k in admin_get(p, "/api/keys") if k["name"] == "k1")
        req = urllib.request.Request(p.admin + f"/api/keys/{kid}", method="DELETE", headers={
            "Authorization": f"Bearer {p.token_file.read_text().strip()}"})
        urllib.request.urlopen(req, timeout=10).read()
        assert ask(p.api, keys[1]) == 401  # revoked, and its raw form offered again
        token = p.token_file.read_text().strip()
        wait_until(lambda: admin_get(p, "/api/usage?since=3600")["rows"], 20, "usage recorded")
        if pg is not None:  # the store gone a while: what reports its failure must not carry its password
            pg.outage()
            try:
                assert ask(p.api, keys[0]) in (200, 503)
                codes = []
                for path in ("/api/keys",):  # each store read waits out the connect timeout: one is enough
                    try:
                        admin_raw(p, path, timeout=30)  # a store read waits out its connect timeout (10 s)
                        codes.append(200)
                    except urllib.error.HTTPError as e:
                        codes.append(e.code)
                assert set(codes) <= {200, 503} and 503 in codes, codes  # the store's failure was reported
            finally:
                pg.back()
            wait_until(lambda: ask(p.api, keys[0]) == 200, 30, "served again with the store back")

        secrets = {f"key {i}": k[PREFIX_LEN:] for i, k in enumerate(keys)}  # the public prefix may be shown
        secrets["the near-miss key"] = near_miss[PREFIX_LEN:]
        secrets["the operator token"] = token
        if pg is not None:
            secrets["the database password"] = PASSWORD
        places: dict[str, bytes] = {}
        for f in sorted(p.workdir.rglob("*")):
            if f.is_file() and f not in (p.token_file, tmp_path / "pg.password"):
                places[str(f.relative_to(p.workdir))] = f.read_bytes()  # the store, its WAL, journals, logs
        for path in ("/metrics", "/health", "/api/nodes", "/api/nodes/s0", "/api/status", "/api/models",
                     "/api/replicas", "/api/explain/m", "/api/events?limit=1000", "/api/keys", "/api/usage?since=3600",
                     "/api/usage.csv?since=3600", "/api/router/view", "/admin", "/admin/app.js", "/admin/view"):
            places[path] = admin_raw(p, path)
        if pg is None:  # the WAL was searched while it held data
            assert any("-wal" in name for name in places), sorted(places)
        else:
            places["PostgreSQL's log"] = (pg.dir / "log").read_bytes()
        found = [f"{what} in {where}" for where, data in places.items() for what, s in secrets.items()
                 if s.encode() in data]
        assert not found, found
    except BaseException:
        print(dump_logs(p))
        raise
    finally:
        c.stop()
