"""A node on another host (its own network namespace): it finds its own address from the route to the control
plane, the router reaches its engine across the link (through the node's gate, streams too), and nobody else
does."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

from llmgw.dev.cluster import Cluster, NodePlan, admin_get, admin_post, admin_up
from tests.harness import plan, wait_until
from tests.integration.conftest import dump_logs
from tests.netns import host, need_network_tools

MODEL = {
    "name": "m",
    "source": "org/m",
    "engine": "sim",
    "profile": {"gpus_per_shard": 1, "sim": {"tokens": 3}},
    "scaling": {"min": 1, "max": 1},
}


def test_node_in_another_namespace_discovers_its_address_and_serves(tmp_path: Path, running: list[Cluster]) -> None:
    need_network_tools()
    with host() as h:
        p = plan(
            tmp_path,
            [NodePlan(id="remote01", address="", netns=h.netns)],
            [MODEL],
            heartbeat_interval="0.3s",
            reconcile_interval="0.2s",
            control_address=h.gateway,
        )
        c = Cluster(p)
        running.append(c)
        c.start()
        try:
            wait_until(lambda: admin_up(p), 20, "control plane up")
            rows = wait_until(lambda: admin_get(p, "/api/nodes"), 20, "remote node registered")
            assert rows[0]["node"] == "remote01" and rows[0]["address"] == h.address  # found, not written
            ready = wait_until(
                lambda: [r for r in admin_get(p, "/api/status")["replicas"] if r["state"] == "ready"],
                30,
                "replica ready on the remote node",
            )
            assert ready[0]["endpoint"].startswith(f"http://{h.address}:")
            key = admin_post(p, "/api/keys", {"name": "t"})["key"]
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            req = urllib.request.Request(
                p.api + "/v1/chat/completions",
                data=json.dumps(body).encode(),
                headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
            )
            with urllib.request.urlopen(req, timeout=20) as r:
                assert json.loads(r.read())["usage"]["completion_tokens"] == 3
            # streamed across the link through the node's gate, event by event
            req = urllib.request.Request(
                p.api + "/v1/chat/completions", data=json.dumps({**body, "stream": True}).encode(),
                headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=20) as r:
                events = [ln for ln in r.read().decode().split("\n\n") if ln.startswith("data: ")]
            assert len(events) >= 4 and events[-1] == "data: [DONE]", events
            # from this host, the replica's port on the node answers no one without the replica's secret
            for path in ("/health", "/metrics", "/v1/models", "/tokenize", "/v1/chat/completions"):
                try:
                    urllib.request.urlopen(urllib.request.Request(ready[0]["endpoint"] + path, data=b"{}"), timeout=10)
                    raise AssertionError(f"{path} answered without the secret")
                except urllib.error.HTTPError as e:
                    assert e.code == 401, (path, e.code)
        except BaseException:
            print(dump_logs(p))
            raise
        finally:
            c.stop()
