"""Drain, end to end: a replica told to stop while it streams leaves routing at once, its stream finishes whole,
and only then is its engine stopped. Real control plane, agent, sim engines and router; the stop is a scale-down
on load (the way a busy replica is removed: eviction and idleness pass over replicas with requests in flight)."""

from __future__ import annotations

import http.client
import json
import threading
from pathlib import Path

from bench.addresses import engine_ports, loopback

from llmgw.dev.cluster import Cluster, NodePlan, admin_get, admin_post
from tests.harness import plan, wait_until
from tests.integration.conftest import dump_logs, start_cluster


class Stream(threading.Thread):
    """One streamed chat request read to its end: its route, its content events and whether it ended [DONE]."""

    def __init__(self, port: int, key: str, max_tokens: int) -> None:
        super().__init__(daemon=True)
        self.port, self.key, self.max_tokens = port, key, max_tokens
        self.status, self.route, self.tokens, self.done, self.error = 0, "", 0, False, ""
        self.started = threading.Event()

    def run(self) -> None:
        body = json.dumps({"model": "d", "stream": True, "max_tokens": self.max_tokens,
                           "messages": [{"role": "user", "content": "hi"}]})
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            c.request("POST", "/v1/chat/completions", body, {"Authorization": f"Bearer {self.key}",
                                                             "Content-Type": "application/json"})
            r = c.getresponse()
            self.status, self.route = r.status, r.getheader("X-Llmgw-Route", "")
            self.started.set()
            for line in r:
                if line.startswith(b"data: [DONE]"):
                    self.done = True
                elif line.startswith(b"data: {"):
                    choices = json.loads(line[6:]).get("choices") or [{}]
                    self.tokens += bool(choices[0].get("delta", {}).get("content"))
        except Exception as e:  # the assertions below say what went wrong
            self.error = f"{type(e).__name__}: {e}"
        finally:
            self.started.set()
            c.close()


def replica_of(route: str) -> str:
    return route.split("replica=")[1].split(";")[0] if "replica=" in route else ""


def test_a_stream_on_a_replica_scaled_down_under_it_finishes_and_new_requests_go_elsewhere(
    tmp_path: Path, running: list[Cluster]
) -> None:
    model = {"name": "d", "source": "org/d", "engine": "sim",
             "profile": {"gpus_per_shard": 1, "gpu_class": "H100-80G", "sim": {"tokens": 150,
                                                                               "tokens_per_second": 10}},
             "scaling": {"min": 1, "max": 2, "target_in_flight": 2, "scale_up_after": "0.3s",
                         "scale_down_after": "1s"}}
    p = plan(tmp_path, [NodePlan(id="node01", address=loopback(), port_range=engine_ports())], [model],
             heartbeat_interval="0.3s", reconcile_interval="0.2s",
             extra_server={"router": {"expose_routing": True}})  # X-Llmgw-Route names the replica
    start_cluster(p, running)
    try:
        key = admin_post(p, "/api/keys", {"name": "t"})["key"]

        def ready() -> list[str]:
            return sorted(r["id"] for r in admin_get(p, "/api/replicas") if r["stop"] is None and not r["failed"]
                          and any(c["type"] == "Ready" and c["status"] == "True" for c in r["conditions"]))

        (first,) = wait_until(ready, 30, "the first replica ready")
        # three 8-second streams on one replica: above 2 in flight per replica, so a second one is added (it took
        # 3.4 s from placed to ready on a loaded 2-core CI machine, which 4-second streams did not outlast)
        load = [Stream(p.api_port, key, 80) for _ in range(3)]
        for s in load:
            s.start()
        (second,) = wait_until(lambda: [r for r in ready() if r != first], 30, "a second replica, scaled up")
        assert all(s.is_alive() for s in load), "the load ended before the second replica served: slow machine"
        # a 15-second stream: the least loaded replica is the new one
        long = Stream(p.api_port, key, 150)
        long.start()
        assert long.started.wait(20) and long.status == 200, long.error
        assert replica_of(long.route) == second, long.route
        for s in load:
            s.join(30)
        # one request in flight over two replicas is below half the target: the newest (the one streaming) goes

        def stopping() -> bool:
            return any(r["id"] == second and r["stop"] for r in admin_get(p, "/api/replicas"))

        wait_until(stopping, 20, "the replica under the long stream told to stop")
        assert long.is_alive(), "the long stream ended before the stop: nothing was drained"
        during = [Stream(p.api_port, key, 2) for _ in range(4)]
        for s in during:
            s.start()
        for s in during:
            s.join(30)
            assert s.status == 200 and s.done, (s.status, s.error)
            assert replica_of(s.route) == first, f"a new request reached the draining replica: {s.route}"
        assert long.is_alive(), "the long stream was cut"
        long.join(30)
        assert long.status == 200 and long.done and long.tokens == 150, (long.tokens, long.done, long.error)
        wait_until(lambda: [r["id"] for r in admin_get(p, "/api/replicas")] == [first], 20,
                   "the drained replica stopped and gone")
        events = [e["message"] for e in admin_get(p, "/api/events?limit=200")]
        assert any(f"replica {second} of d stopping: scaled down" in e for e in events), events
    except BaseException:
        print(dump_logs(p))
        raise
