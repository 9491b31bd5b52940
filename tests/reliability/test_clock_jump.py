"""Check 14: the control plane's wall clock moved an hour forward, then back (libfaketime, driven through a file,
so only the server's process sees it): no node is lost and no replica idles out early, because every duration it
measures runs on the monotonic clock (core/clock.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from bench.addresses import engine_ports, loopback

from llmgw.dev.cluster import Cluster, NodePlan, admin_get, admin_post, admin_up
from tests.harness import holds_for, plan, wait_until
from tests.integration.conftest import dump_logs
from tests.integration.test_walking_skeleton import chat
from tests.tools import unavailable

FAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"
MODEL = {"name": "od", "source": "org/od", "engine": "sim", "profile": {"gpus_per_shard": 1, "sim": {"tokens": 2}},
         "scaling": {"min": 0, "max": 1, "stop_unused_after": "120s"}}


def test_the_wall_clock_jumping_an_hour_either_way_loses_no_node_and_idles_nothing_out(
    tmp_path: Path, running: list[Cluster]
) -> None:
    if not os.path.exists(FAKETIME):
        unavailable(f"{FAKETIME} missing (apt-get install faketime)")
    offset = tmp_path / "offset"
    offset.write_text("+0\n")
    nodes = [NodePlan(id=f"c{i}", address=loopback(), gpus=1,
                      port_range=engine_ports()) for i in range(3)]
    p = plan(tmp_path, nodes, [MODEL], heartbeat_interval="0.5s", node_lost_after="4s", reconcile_interval="0.2s")
    c = Cluster(p)
    running.append(c)
    saved = dict(os.environ)
    os.environ.update(LD_PRELOAD=FAKETIME, FAKETIME_TIMESTAMP_FILE=str(offset), FAKETIME_NO_CACHE="1",
                      DONT_FAKE_MONOTONIC="1")
    try:
        c.start_server()  # only the control plane's clock is moved
    finally:
        os.environ.clear()
        os.environ.update(saved)
    for n in nodes:
        c.start_agent(n.id)
    try:
        wait_until(lambda: admin_up(p), 30, "control plane up")
        wait_until(lambda: len(admin_get(p, "/api/nodes")) == 3, 30, "three nodes")
        key = admin_post(p, "/api/keys", {"name": "t"})["key"]
        assert json.loads(chat(p, key, "od")[1])["usage"]
        replica = wait_until(lambda: [r["id"] for r in admin_get(p, "/api/status")["replicas"]
                                      if r["state"] == "ready"], 30, "od ready")[0]

        def steady() -> bool:
            nodes_live = all(n["state"] == "live" for n in admin_get(p, "/api/nodes"))
            ready = [r["id"] for r in admin_get(p, "/api/status")["replicas"] if r["state"] == "ready"]
            return nodes_live and ready == [replica]

        for jump in ("+3600", "-3600"):  # an hour forward from true time, then an hour back from it
            offset.write_text(jump + "\n")
            holds_for(steady, 6, f"after the wall clock moved {jump} s: every node live, od's replica ready")
        assert json.loads(chat(p, key, "od")[1])["usage"]
        assert not [e for e in admin_get(p, "/api/events") if "lost" in e["message"] or "idle" in e["message"]]
    except BaseException:
        print(dump_logs(p))
        raise
    finally:
        c.stop()
