"""A model's sidecar in a running cluster (real control plane, agent, sidecar and sim engine): while the engine
waits for it, and after it exits, the replica says so with the sidecar's words on the API, `ctl status`, the
dashboard and /metrics."""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path
from typing import Any

from bench.addresses import engine_ports, loopback
from prometheus_client.parser import text_string_to_metric_families

from llmgw.dev.cluster import Cluster, ClusterPlan, NodePlan, admin_get
from tests.agent.supervisor.test_sidecar_order import SIDECAR
from tests.harness import free_port, plan, wait_until
from tests.integration.conftest import dump_logs, start_cluster
from tests.integration.test_engine_install import ctl_json

DEADLINE_S = 60.0


def _replica(p: ClusterPlan) -> dict[str, Any] | None:
    return next((r for r in admin_get(p, "/api/status")["replicas"] if r["model"] == "tok-model"), None)


def _phase_reasons(metrics_port: int) -> set[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {s.labels["reason"] for fam in text_string_to_metric_families(text) for s in fam.samples
            if s.name == "llmgw_replica_phase" and s.labels.get("model") == "tok-model"}


def _dashboard(p: ClusterPlan) -> str:
    token = p.token_file.read_text().strip()
    req = urllib.request.Request(f"{p.admin}/admin/view", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return str(r.read().decode())


def _said(p: ClusterPlan, reason: str, words: str) -> dict[str, Any] | None:
    r = _replica(p)
    return r if r is not None and r["reason"] == reason and words in r["message"] else None


def test_a_sidecar_waited_for_and_one_that_exits_are_said_on_every_surface(tmp_path: Path,
                                                                          running: list[Cluster]) -> None:
    rec = tmp_path / "rec"
    rec.mkdir()
    (rec / "sidecar.py").write_text(SIDECAR)
    model = {"name": "tok-model", "source": "org/tok", "engine": "sim", "profile": {"gpus_per_shard": 1},
             "scaling": {"min": 1, "max": 1},
             "sidecars": [{"name": "tok", "command": [sys.executable, str(rec / "sidecar.py"), str(rec), "exit"],
                           "port": True, "ready": {"http": "/ready", "timeout": "10m"}}]}
    metrics_port = free_port()
    p = plan(tmp_path / "cluster", [NodePlan(id="node01", address=loopback(), port_range=engine_ports())], [model],
             heartbeat_interval="0.3s", reconcile_interval="0.2s",
             extra_server={"metrics_listen": f"127.0.0.1:{metrics_port}"})
    start_cluster(p, running)
    try:
        waiting = wait_until(lambda: _said(p, "SidecarsStarting", "waiting for sidecar tok to be ready"),
                             DEADLINE_S, lambda: f"the replica waiting for its sidecar: {_replica(p)}")
        assert waiting["state"] != "ready"
        row = next(r for r in ctl_json(p, "status")["replicas"] if r["id"] == waiting["id"])
        assert row["reason"] == "SidecarsStarting" and "waiting for sidecar tok" in row["message"]
        assert "SidecarsStarting: " in _dashboard(p) and "waiting for sidecar tok" in _dashboard(p)
        wait_until(lambda: _phase_reasons(metrics_port) == {"SidecarsStarting"}, DEADLINE_S, "the phase's reason")

        (rec / "go").touch()
        wait_until(lambda: (r := _replica(p)) is not None and r["state"] == "ready", DEADLINE_S, "the replica ready")

        (rec / "die").touch()  # the sidecar exits with its words, and at every restart after
        words = "sidecar tok exited (code 3): tokenizer: cannot load vocab.json"
        failed = wait_until(lambda: _said(p, "SidecarFailed", words), DEADLINE_S,
                            lambda: f"the replica saying its sidecar exited: {_replica(p)}")
        assert failed["state"] != "ready"
        wait_until(lambda: any(r["reason"] == "SidecarFailed" and words in r["message"]
                               for r in ctl_json(p, "status")["replicas"]), DEADLINE_S, "ctl status saying so")
        wait_until(lambda: words in _dashboard(p), DEADLINE_S, "the dashboard saying so")
        wait_until(lambda: "SidecarFailed" in _phase_reasons(metrics_port), DEADLINE_S, "/metrics saying so")
    except BaseException:
        print(dump_logs(p))
        raise
