"""A new model placed on four nodes of one fabric is downloaded from its origin once; the other three copy it from
the node that fetched it over mutual TLS. Real processes throughout, the origin held after its first chunk."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Any

from bench.addresses import engine_ports, loopback

from llmgw.dev.cluster import Cluster, NodePlan, admin_get, admin_up
from tests.agent.installs.release import Release, release_server
from tests.harness import plan, wait_until
from tests.integration.conftest import dump_logs
from tests.integration.test_engine_install import ctl_json

DATA = os.urandom(24_000_000)
NAME = "fabric-model.gguf"
NODES = [f"w{i}" for i in range(1, 5)]


def test_four_nodes_of_a_fabric_download_a_new_model_once(tmp_path: Path, running: list[Cluster]) -> None:
    gate = threading.Event()
    with release_server(Release(files={NAME: DATA}, hold={NAME: gate})) as origin:
        url = origin.url(NAME)
        p = plan(
            tmp_path,
            [NodePlan(id=n, address=loopback(), fabric="ib-a", adapters={"mlx5_0": "ACTIVE"},
                      port_range=engine_ports()) for n in NODES],
            [{"name": "fetched", "source": url, "sha256": hashlib.sha256(DATA).hexdigest(), "size": len(DATA),
              "engine": "sim", "profile": {"gpus_per_shard": 8, "gpu_class": "H100-80G"},
              "scaling": {"min": 4, "max": 4}}],
            heartbeat_interval="0.5s",
            reconcile_interval="0.3s",
        )
        c = Cluster(p)
        running.append(c)
        c.start()
        try:
            wait_until(lambda: admin_up(p), 20, "control plane up")

            def fetching() -> dict[str, dict[str, Any]] | None:
                rows = {r["node"]: r for r in ctl_json(p, "nodes")}
                f = {n: r["fetches"][0] for n, r in rows.items() if r["fetches"]}
                leaders = [n for n, x in f.items() if x["via"] == "origin" and x["done_bytes"] > 0]
                waiting = [n for n, x in f.items() if x["state"] == "waiting" and "waiting for" in x["message"]]
                return rows if len(leaders) == 1 and len(waiting) == 3 else None

            rows = wait_until(fetching, 60, "one node fetching from the origin, three waiting for it, in ctl nodes")
            (leader,) = [n for n, r in rows.items() if r["fetches"][0]["via"] == "origin"]
            got = rows[leader]["fetches"][0]
            assert got["state"] == "fetching" and got["total_bytes"] == len(DATA) and got["source"] == url, got
            assert any(w.startswith(f"weights {url}: fetching from the origin: ") and " of 24 MB" in w
                       for w in rows[leader]["warnings"]), rows[leader]["warnings"]
            for n in set(NODES) - {leader}:
                assert rows[n]["fetches"][0]["message"].startswith(f"waiting for {leader} to fetch it"), rows[n]

            def explained() -> list[dict[str, Any]] | None:  # replica status follows the nodes' next reports
                told = ctl_json(p, "explain", "fetched")
                waits = [c for r in told["replicas"] for c in r["conditions"] if c["type"] == "Ready"]
                return waits if len(waits) == 4 and all(c["reason"] == "WeightsFetching" for c in waits) else None

            wait_until(explained, 30, "ctl explain: four replicas not ready, WeightsFetching")

            gate.set()

            def all_ready() -> bool:
                reps = [r for r in admin_get(p, "/api/replicas") if r["model"] == "fetched"]
                return len(reps) == 4 and all(r["endpoint"] for r in reps)

            wait_until(all_ready, 90, "four replicas ready")
            assert len(origin.ranges) == 1, f"one download from the origin: {origin.ranges}"
            logs = {n: (p.workdir / "logs" / f"agent-{n}.log").read_text() for n in NODES}
            served = logs[leader].count(f"weights: serving {NAME} to node ")
            copied = sum(logs[n].count(f"copying from {leader}") for n in NODES)
            assert served == 3 and copied == 3, (served, copied)
            for n in NODES:
                held = next(r for r in ctl_json(p, "nodes") if r["node"] == n)["weights"]
                assert url in held, (n, held)
            status = ctl_json(p, "status")
            (fabric,) = status["fabrics"]
            assert fabric["fabric"] == "ib-a" and fabric["models_held"] == ["fetched"], fabric
        except BaseException:
            print(dump_logs(p))
            raise
