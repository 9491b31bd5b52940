"""Two `llmgw server` processes on one real PostgreSQL database, two simulated nodes each talking to one server only
(node01 to the follower, node02 to the leader). Their reports stay the same, so no node record is written for them:
the servers share when they heard each node through one renewals row each, and neither node is declared lost."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from bench.addresses import engine_ports, loopback

from llmgw.dev.cluster import Cluster, NodePlan
from llmgw.store.postgres import PostgresStore
from tests.harness import free_port, plan, wait_until
from tests.integration.conftest import dump_logs
from tests.pg import PASSWORD, Postgres

LOST_AFTER = 4.0
MODEL = {"name": "m", "source": "org/m", "engine": "sim", "scaling": {"min": 0, "max": 1}}


def test_nodes_each_heard_by_one_server_stay_alive_at_both(tmp_path: Path, running: list[Cluster],
                                                            postgres: Postgres) -> None:
    dsn = postgres.fresh_db()
    (tmp_path / "pg.password").write_text(PASSWORD + "\n")
    ports = [(free_port(), free_port(), free_port()) for _ in range(2)]  # agents, API, admin
    to = [f"https://127.0.0.1:{a}" for a, _, _ in ports]
    nodes = [NodePlan(id=f"node0{i + 1}", address=loopback(), gpus=1, port_range=engine_ports(),
                      agent_extra={"control_planes": [to[1 - i]]}) for i in range(2)]
    p = plan(tmp_path, nodes, [MODEL], heartbeat_interval="0.3s", reconcile_interval="0.2s",
             node_lost_after=f"{LOST_AFTER:g}s", extra_server={
                 "store": {"kind": "postgres", "dsn": dsn, "password_file": "pg.password", "path": "state/llmgw.db"},
                 "leader_lease": "3s"})
    conf = yaml.safe_load((tmp_path / "server.yaml").read_text())
    for i, name in enumerate(("server.yaml", "server1.yaml")):
        a, api, admin = ports[i]
        (tmp_path / name).write_text(yaml.safe_dump({
            **conf, "agent_listen": f"127.0.0.1:{a}", "api_listen": f"127.0.0.1:{api}",
            "admin_listen": f"127.0.0.1:{admin}", "usage_journal_dir": f"state/journal-{i}"}, sort_keys=False))
    c = Cluster(p)
    running.append(c)
    def get(i: int, path: str) -> Any:
        req = urllib.request.Request(f"http://127.0.0.1:{ports[i][2]}{path}",
                                     headers={"Authorization": f"Bearer {p.token_file.read_text().strip()}"})
        with urllib.request.urlopen(req, timeout=5) as r:
            return json.loads(r.read())

    def lost(i: int) -> dict[str, bool]:
        return {n["node"]: n["state"] == "lost" for n in get(i, "/api/nodes")}

    db = PostgresStore(dsn, PASSWORD).open()
    try:
        c.start_server()
        wait_until(lambda: get(0, "/health")["leader"]["leading"], 20, "the first server up and leading")
        c.start_server(tmp_path / "server1.yaml", "server1")
        for n in p.nodes:
            c.start_agent(n.id)
        both = {"node01": False, "node02": False}
        wait_until(lambda: lost(0) == both and lost(1) == both, 30, "both nodes known, and live, at both servers")
        revs: list[int] = []

        def steady() -> bool:  # the nodes' reports no longer change (their first ones differ: engines probed)
            revs.append(db.revs()["nodes"])
            return len(revs) >= 2 and revs[-1] == revs[-2]

        wait_until(steady, 30, lambda: f"node records still being written: revisions {revs[-5:]}", interval=1.0)
        start, views = time.monotonic(), [(both, both)]

        def watched() -> bool:  # both live at both servers throughout (or a view that says otherwise)
            views.append((lost(0), lost(1)))
            return views[-1] != (both, both) or time.monotonic() - start > 3 * LOST_AFTER

        wait_until(watched, 6 * LOST_AFTER, f"{3 * LOST_AFTER:g}s of both servers' views")
        assert views[-1] == (both, both), f"a node declared lost (leader's view, follower's): {views[-1]}"
        assert db.revs()["nodes"] == revs[-1], "unchanged reports wrote node records"
        for name in ("node01", "node02"):  # when each server last heard it: apart by a pass and a heartbeat at most
            heard = [get(i, f"/api/nodes/{name}")["last_seen"] for i in (0, 1)]
            assert abs(heard[0] - heard[1]) < 1.0, f"{name} last heard, by the leader and the follower: {heard}"
        servers = {r[0]: set(r[2]) for r in db.renewals(time.time() - 60)}
        assert sorted(servers.values(), key=sorted) == [{"node01"}, {"node02"}], servers
    except BaseException:
        print(dump_logs(p))
        raise
    finally:
        db.close()
