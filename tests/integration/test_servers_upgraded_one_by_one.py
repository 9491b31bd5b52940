"""Servers on one PostgreSQL database upgraded one at a time: a server of the previous release (wire version 10, which
reads no renewals and counts a node's silence from its record) leads, a server of this tree follows, and a node of
this tree talks to the new server only (another to the old one: one silent node is no silent majority). Its reports
stay the same, so the new server would write no record for it; it writes the records the old leader reads instead,
and the node is never declared lost there."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from bench.addresses import engine_ports, loopback

from llmgw.dev.cluster import NodePlan
from tests.harness import free_port, plan, wait_until
from tests.integration.conftest import dump_logs
from tests.pg import PASSWORD, Postgres
from tests.releases import MixedCluster, unpack

LOST_AFTER = 4.0
MODEL = {"name": "m", "source": "org/m", "engine": "sim", "scaling": {"min": 0, "max": 1}}


def test_a_node_of_a_new_server_stays_alive_at_an_old_leader(tmp_path: Path, postgres: Postgres) -> None:
    dsn = postgres.fresh_db()
    (tmp_path / "pg.password").write_text(PASSWORD + "\n")
    ports = [(free_port(), free_port(), free_port()) for _ in range(2)]  # agents, API, admin: old, new
    nodes = [NodePlan(id=f"node0{i + 1}", address=loopback(), gpus=1, port_range=engine_ports(),
                      agent_extra={"control_planes": [f"https://127.0.0.1:{ports[1 - i][0]}"]})
             for i in range(2)]  # node01 to the new server, node02 to the old one
    p = plan(tmp_path / "cluster", nodes, [MODEL], heartbeat_interval="0.3s", reconcile_interval="0.2s",
             node_lost_after=f"{LOST_AFTER:g}s", extra_server={
                 "store": {"kind": "postgres", "dsn": dsn, "password_file": str(tmp_path / "pg.password"),
                           "path": "state/llmgw.db"},
                 "leader_lease": "3s"})
    conf = yaml.safe_load((p.workdir / "server.yaml").read_text())
    for i, name in enumerate(("server.yaml", "server1.yaml")):
        a, api, admin = ports[i]
        (p.workdir / name).write_text(yaml.safe_dump({
            **conf, "agent_listen": f"127.0.0.1:{a}", "api_listen": f"127.0.0.1:{api}",
            "admin_listen": f"127.0.0.1:{admin}", "usage_journal_dir": f"state/journal-{i}"}, sort_keys=False))
    c = MixedCluster(p, unpack(tmp_path / "release"), {"server"})  # "server": the old one, "server1": this tree's

    def get(i: int, path: str) -> Any:
        req = urllib.request.Request(f"http://127.0.0.1:{ports[i][2]}{path}",
                                     headers={"Authorization": f"Bearer {p.token_file.read_text().strip()}"})
        with urllib.request.urlopen(req, timeout=5) as r:
            return json.loads(r.read())

    def lost_at_old() -> dict[str, bool]:
        return {n["node"]: n["state"] == "lost" for n in get(0, "/api/nodes")}

    try:
        c.start_server()
        wait_until(lambda: get(0, "/health")["leader"]["leading"], 20, "the old server up and leading")
        c.start_server(p.workdir / "server1.yaml", "server1")
        wait_until(lambda: not get(1, "/health")["leader"]["leading"], 20, "the new server up and following")
        for n in nodes:
            c.start_agent(n.id)
        live = {"node01": False, "node02": False}
        wait_until(lambda: lost_at_old() == live, 30, "both nodes known, and live, at the old leader")
        start, views = time.monotonic(), [live]

        def watched() -> bool:  # both live at the old leader throughout, well past node_lost_after
            views.append(lost_at_old())
            return views[-1] != live or time.monotonic() - start > 3 * LOST_AFTER

        wait_until(watched, 6 * LOST_AFTER, f"{3 * LOST_AFTER:g}s of the old leader's view")
        assert views[-1] == live, (
            f"{views[-1]}: node01, heard by the new server every 0.3s, was declared lost by the old leader after "
            f"{time.monotonic() - start:.1f}s (node_lost_after {LOST_AFTER:g}s)")
        assert get(0, "/health")["leader"]["leading"], "the old server no longer leads: the test tested nothing"
        said = c.log("server1")
        assert said.count("older release") == 1, said[-3000:]  # said once, as the operator reads it
        for name in ("server", "server1", "agent-node01", "agent-node02"):
            assert "Traceback" not in c.log(name), c.log(name)[-3000:]
    except BaseException:
        print(dump_logs(p))
        raise
    finally:
        c.stop()
