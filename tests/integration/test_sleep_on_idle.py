"""Sleep instead of unload, end to end with real processes: an idle on-demand model with a sleep block sleeps (its
engine process kept, its GPUs free), the next request is held while it wakes and is answered sooner than a cold
load, and the phase is "sleeping" in the API and /metrics."""

from __future__ import annotations

import urllib.request
from pathlib import Path

from bench.addresses import engine_ports, loopback

from llmgw.dev.cluster import Cluster, NodePlan, admin_get, admin_post
from tests.harness import free_port, plan, wait_until
from tests.integration.conftest import dump_logs, start_cluster
from tests.integration.test_on_demand import chat, od

LOAD_S, WAKE_S = 3.0, 0.3


def test_an_idle_model_sleeps_and_the_next_request_wakes_it(tmp_path: Path, running: list[Cluster]) -> None:
    m = od("od-sleepy", "2s")
    m["profile"]["sim"].update(load_seconds=f"{LOAD_S}s", wake_seconds=f"{WAKE_S}s")
    m["sleep"] = {"level": 1, "min_stay": "1s"}
    metrics_port = free_port()
    p = plan(tmp_path, [NodePlan(id="node01", address=loopback(), port_range=engine_ports())], [m],
             heartbeat_interval="0.3s", reconcile_interval="0.2s", load_wait="30s",
             extra_server={"metrics_listen": f"127.0.0.1:{metrics_port}"})
    start_cluster(p, running)
    try:
        wait_until(lambda: admin_get(p, "/api/nodes"), 20, "node registered")
        key = admin_post(p, "/api/keys", {"name": "t"})["key"]
        status, body, cold = chat(p, key, "od-sleepy")
        assert status == 200, body
        assert cold >= LOAD_S

        def asleep() -> bool:
            reps = admin_get(p, "/api/replicas")
            cap = admin_get(p, "/api/status")["capacity"]
            said = [c["message"] for r in reps for c in r["conditions"] if c["type"] == "Ready"]
            return bool(len(reps) == 1 and reps[0]["sleep_level"] == 1 and cap and cap[0]["free"] == 8
                        and "asleep at level 1" in said[0])  # the agent's words: its engine sleeps

        wait_until(asleep, 20, "the idle replica's engine asleep and its GPUs free")
        (rep,) = admin_get(p, "/api/replicas")
        ready = next(c for c in rep["conditions"] if c["type"] == "Ready")
        assert (ready["status"], ready["reason"]) == ("False", "Sleeping"), ready
        (line,) = admin_get(p, "/api/status")["replicas"]  # what ctl status and the dashboard show
        assert (line["state"], line["reason"]) == ("sleeping", "Sleeping"), line
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
            assert 'phase="sleeping"' in r.read().decode()

        status, body, woke = chat(p, key, "od-sleepy")  # held while it wakes, then answered
        assert status == 200, body
        print(f"cold load answered in {cold:.2f}s, wake in {woke:.2f}s")
        assert WAKE_S <= woke < cold - 1.0, (cold, woke)
        events = [e["message"] for e in admin_get(p, "/api/events?limit=200")]
        assert any("asleep at level 1" in e for e in events), events
        assert any("waking: a request asks for it" in e for e in events), events
        assert not any("stopping" in e for e in events), events
    except BaseException:
        print(dump_logs(p))
        raise
