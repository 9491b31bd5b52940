"""Seeing one running cluster (real control plane, agents, sim engines, a multi-node replica, a planted GPU fault, an
unplaceable model): metrics_listen serves only /metrics and /health, /metrics carries this cluster's values, and
/admin, in a real headless Chromium, shows what `ctl status --json` shows (a screenshot is kept as an artifact)."""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bench.addresses import engine_ports, loopback
from prometheus_client.parser import text_string_to_metric_families

from llmgw.control.chargeback.charge_views import OPERATOR_NAME
from llmgw.dev.cluster import Cluster, ClusterPlan, NodePlan, admin_get, admin_post, admin_up
from llmgw.records.chargeback import OPERATOR, ChargeRow
from llmgw.store.base import hour_of
from tests.control.chargeback.test_usage_gpu_time import plant_charges
from tests.harness import free_port, plan, wait_until
from tests.integration.conftest import dump_logs
from tests.integration.test_engine_install import ctl_json
from tests.tools import unavailable

# its tests share a module fixture that starts processes: one worker runs them all (make test: --dist loadgroup)
pytestmark = pytest.mark.xdist_group("dashboard")

XID = "Xid 79: GPU has fallen off the bus"
CHROMIUM = "/usr/bin/chromium"
STREAMS = 3


def _models() -> list[dict[str, Any]]:
    return [
        # on node03's L40S cards: placed wherever it fits first, it could take a node sim-405b needs whole
        {"name": "sim-8b", "source": "org/sim-8b", "engine": "sim",
         "profile": {"gpus_per_shard": 2, "gpu_class": "L40S-45G", "sim": {"tokens": 8, "tokens_per_second": 400}},
         "scaling": {"min": 1, "max": 1}},
        {"name": "sim-405b", "source": "org/sim-405b", "engine": "sim",
         "profile": {"gpus_per_shard": 4, "nodes": 2, "gpu_class": "H100-80G"}, "scaling": {"min": 1, "max": 1}},
        {"name": "m-nowhere", "source": "org/nowhere", "engine": "sim",
         "profile": {"gpus_per_shard": 1, "gpu_class": "B200-192G"}, "scaling": {"min": 1, "max": 1}},
    ]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ClusterPlan, int, str]]:
    tmp = tmp_path_factory.mktemp("dashboard")
    adapters = {"mlx5_0": "ACTIVE"}
    nodes = [
        NodePlan(id="node01", address=loopback(), fabric="ib-a", adapters=adapters, port_range=engine_ports()),
        NodePlan(id="node02", address=loopback(), fabric="ib-a", adapters=adapters, port_range=engine_ports()),
        NodePlan(id="node03", address=loopback(), fabric="ib-b", adapters=adapters, port_range=engine_ports(),
                 faulty={3: XID}, gpu_name="NVIDIA L40S"),
    ]
    metrics_port = free_port()
    p = plan(tmp, nodes, _models(), heartbeat_interval="1s",
             extra_server={"metrics_listen": f"127.0.0.1:{metrics_port}"})
    c = Cluster(p)
    c.start()
    try:
        wait_until(lambda: admin_up(p), 30, "the control plane up")

        def settled() -> bool:
            s = admin_get(p, "/api/status")
            ready = {r["model"] for r in s["replicas"] if r["state"] == "ready"}
            nowhere = [r for r in s["replicas"] if r["model"] == "m-nowhere" and r["placement"]]
            return s["nodes_live"] == 3 and {"sim-8b", "sim-405b"} <= ready and bool(nowhere)

        try:
            wait_until(settled, 60, "sim-8b and sim-405b ready, m-nowhere explained")
        except AssertionError:
            raise AssertionError(dump_logs(p)) from None
        key = admin_post(p, "/api/keys", {"name": "dash"})["key"]
        yield p, metrics_port, key
    finally:
        c.stop()


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _stream(p: ClusterPlan, key: str) -> None:
    body = json.dumps({"model": "sim-8b", "stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode()
    req = urllib.request.Request(p.api + "/v1/chat/completions", data=body, method="POST",
                                 headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 200
        assert b"data: [DONE]" in r.read()


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def _value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def test_metrics_listen_serves_metrics_and_health_only(cluster: tuple[ClusterPlan, int, str]) -> None:
    p, port, _key = cluster
    base = f"http://127.0.0.1:{port}"
    token = p.token_file.read_text().strip()
    auth = {"Authorization": f"Bearer {token}"}
    for path in ("/admin", "/admin/view", "/admin/app.js", "/api/status", "/api/keys", "/api/router/view",
                 "/v1/models", "/v1/chat/completions"):
        status, _ = _get(base + path, auth)
        assert status == 404, f"{path} answered {status} on metrics_listen"
    status, body = _get(base + "/health")
    health = json.loads(body)
    assert status == 200 and health["status"] == "ok" and health["store"]["reachable"] is True
    assert health["leader"]["leading"] is True  # one server on SQLite: it leads
    status, _ = _get(base + "/metrics")
    assert status == 200
    # /metrics stays on admin_listen too, behind the token
    assert _get(p.admin + "/metrics")[0] == 401
    assert _get(p.admin + "/metrics", auth)[0] == 200


def test_metrics_carry_the_known_clusters_values(cluster: tuple[ClusterPlan, int, str]) -> None:
    p, port, key = cluster
    url = f"http://127.0.0.1:{port}/metrics"
    before = _samples(_get(url)[1].decode())
    ttft0 = _value(before, "llmgw_time_to_first_token_seconds_count", model="sim-8b") or 0.0
    for _ in range(STREAMS):
        _stream(p, key)

    def counted() -> dict[tuple[str, frozenset[tuple[str, str]]], float] | None:
        s = _samples(_get(url)[1].decode())
        n = _value(s, "llmgw_time_to_first_token_seconds_count", model="sim-8b")
        return s if n == ttft0 + STREAMS else None

    s = wait_until(counted, 10, f"{STREAMS} more time-to-first-token observations for sim-8b")

    def v(name: str, **labels: str) -> float | None:
        return _value(s, name, **labels)

    assert v("llmgw_requests_total", model="sim-8b", status="200") == ttft0 + STREAMS
    assert v("llmgw_time_between_tokens_seconds_count", model="sim-8b") == ttft0 + STREAMS  # 8 tokens each
    assert v("llmgw_request_duration_seconds_count", model="sim-8b") == ttft0 + STREAMS
    assert v("llmgw_queue_wait_seconds_count", model="sim-8b") == ttft0 + STREAMS
    assert (v("llmgw_completion_tokens_total", model="sim-8b") or 0) >= 8 * STREAMS
    # the cluster: 3 live nodes; 16 H100s, 8 held by sim-405b (4 on each node); 8 L40S, one faulty, 2 held by sim-8b
    assert v("llmgw_nodes", state="live") == 3
    assert (v("llmgw_gpus", gpu_class="H100-80G", state="used"), v("llmgw_gpus", gpu_class="H100-80G", state="free"),
            v("llmgw_gpus", gpu_class="H100-80G", state="faulty")) == (8, 8, 0)
    assert (v("llmgw_gpus", gpu_class="L40S-45G", state="used"), v("llmgw_gpus", gpu_class="L40S-45G", state="free"),
            v("llmgw_gpus", gpu_class="L40S-45G", state="faulty")) == (2, 5, 1)
    assert v("llmgw_replicas", model="sim-405b", state="ready") == 1
    assert v("llmgw_model_wanted_replicas", model="m-nowhere") == 1
    assert v("llmgw_model_ready_replicas", model="m-nowhere") == 0
    assert v("llmgw_gpu_nvlink_peers", node="node01") == 7  # all eight NVLinked
    assert v("llmgw_scale_events_total", model="sim-405b", direction="up", reason="wanted") == 1
    # the engines' own gauges, scraped by the agents, under llmgw's names
    rid = next(r["id"] for r in admin_get(p, "/api/status")["replicas"] if r["model"] == "sim-8b")
    assert any(name == "llmgw_engine_requests_running" and dict(labels).get("replica") == rid
               for name, labels in s), "no engine gauge for sim-8b's replica"


def _chromium_or_skip() -> str:
    if os.path.exists(CHROMIUM):
        return CHROMIUM
    unavailable(f"{CHROMIUM} is missing (apt-get install chromium; .ci/run installs it)")


def artifacts() -> Path:
    d = Path(os.environ.get("LLMGW_ARTIFACTS", Path(__file__).resolve().parents[2] / "test-artifacts"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def _plant_gpu_time(p: ClusterPlan) -> str:
    """GPU time charged to the "dash" key and to the operator, as chargeback writes it; the key's id once the
    summary shows it (it re-reads charges every few seconds)."""
    dash = next(k["id"] for k in admin_get(p, "/api/keys") if k["name"] == "dash")
    h = hour_of(time.time())
    plant_charges(p, [ChargeRow(hour=h, key_id=dash, model="sim-8b", gpu_class="L40S", busy_s=120, load_s=30,
                                idle_s=6, cost=0.25),
                      ChargeRow(hour=h, key_id=OPERATOR, model="sim-405b", gpu_class="H100", idle_s=7200, cost=8)])
    wait_until(lambda: any(k["key_id"] == dash for k in admin_get(p, "/api/status")["gpu_time"]["keys"]), 20,
               "the planted GPU time in /api/status")
    return str(dash)


def test_the_page_shows_what_ctl_status_shows(cluster: tuple[ClusterPlan, int, str], tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    p, _, _ = cluster
    chromium = _chromium_or_skip()
    dash = _plant_gpu_time(p)
    status = ctl_json(p, "status")
    token = p.token_file.read_text().strip()
    shot = artifacts() / "dashboard.png"
    shot.unlink(missing_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=chromium, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"],
        )
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.goto(f"{p.admin}/admin#token={token}")
            page.wait_for_selector("#nodes-live", timeout=15000)
            assert "token" not in page.url  # taken out of the address once read

            def text(sel: str) -> str:
                return page.locator(sel).first.inner_text().strip()

            assert text("#nodes-live") == str(status["nodes_live"])
            assert text("#nodes-total") == str(status["nodes_total"])
            for c in status["capacity"]:
                row = f'table.capacity tr[data-class="{c["gpu_class"]}"]'
                for col in ("used", "faulty", "free", "total"):
                    assert text(f"{row} td.{col}") == str(c[col]), (c["gpu_class"], col)
            for f in status["fabrics"]:
                assert text(f'table.fabrics tr[data-fabric="{f["fabric"]}"] td.free-whole') == str(
                    f["free_whole_nodes"])
            for m in status["models"]:
                row = f'table.models tr[data-model="{m["model"]}"]'
                assert (text(f"{row} td.wanted"), text(f"{row} td.ready")) == (str(m["wanted"]), str(m["ready"]))
            big = next(r for r in status["replicas"] if r["model"] == "sim-405b")
            assert len(big["nodes"]) == 2
            assert text(f'table.replicas tr[data-replica="{big["id"]}"] td.phase') == "ready"
            # the planted faults, in the machine's own words
            assert XID in text('table.nodes tr[data-node="node03"] td.warnings')
            nowhere = next(r for r in status["replicas"] if r["model"] == "m-nowhere")
            assert nowhere["placement"][0] in text(f'table.replicas tr[data-replica="{nowhere["id"]}"] td.why')
            for k in status["gpu_time"]["keys"]:  # GPU time and cost per key, the operator's share named
                row = f'table.gpu-time tr[data-key="{k["key_id"]}"]'
                got = (text(f"{row} td.name"), text(f"{row} td.gpu-seconds"), text(f"{row} td.cost"))
                assert got == (k["name"] or k["key_id"], f'{k["gpu_seconds"]:.1f}', f'{k["cost"]:.4f}'), got
            assert text(f'table.gpu-time tr[data-key="{dash}"] td.gpu-seconds') == "156.0"
            assert text('table.gpu-time tr[data-key=""] td.name') == OPERATOR_NAME
            page.screenshot(path=str(shot), full_page=True)
            assert not errors, errors  # the policy refused nothing the page needs, the script threw nothing
        finally:
            browser.close()
    assert shot.stat().st_size > 10_000


def test_the_page_without_a_token_asks_for_one_and_shows_nothing(cluster: tuple[ClusterPlan, int, str]) -> None:
    p, _, _ = cluster
    status, body = _get(p.admin + "/admin")
    assert status == 200 and b"node01" not in body  # the shell holds no data
    assert _get(p.admin + "/admin/view")[0] == 401
    if shutil.which("chromium") is None and not os.path.exists(CHROMIUM):
        return
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=_chromium_or_skip(), headless=True,
                                     args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        try:
            page = browser.new_page()
            page.goto(f"{p.admin}/admin")
            page.wait_for_selector("#login:not([hidden])", timeout=10000)
            assert page.locator("#view").inner_text().strip() == ""
        finally:
            browser.close()
