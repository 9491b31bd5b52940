"""deploy/monitoring: Prometheus config and alert rules are valid, their promtool unit tests pass, and they use only
metric families the control plane exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from llmgw.control.views.metrics import FAMILIES
from tests.tools import unavailable

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
CONFIG = MONITORING / "prometheus.yml"
RULES = MONITORING / "llmgw-rules.yml"
RULES_TEST = MONITORING / "rules_test.yml"
TIMEOUT_S = 60

# The metric families the control plane exports (histograms without _bucket/_sum/_count).
# To be replaced by the exporter's own list.
EXPORTED = FAMILIES  # the exporter's own list: a renamed metric breaks these tests

METRIC = re.compile(r"\bllmgw_[a-zA-Z0-9_]+")
HISTOGRAM_SUFFIX = re.compile(r"_(bucket|sum|count)$")
REQUIRED_ALERTS = {
    "LlmgwControlPlaneDown",
    "LlmgwNodeLost",
    "LlmgwModelNotServing",
    "LlmgwModelUnderReplicated",
    "LlmgwGPUsFaulty",
    "LlmgwIdleReplicas",
    "LlmgwSlowTimeToFirstToken",
    "LlmgwUsageNotRecorded",
    "LlmgwStoreWritesQueued",
}


def find_promtool() -> str:
    """promtool's path; without it, fail in CI (or with LLMGW_REQUIRE_TOOLS=1), skip elsewhere."""
    found = shutil.which("promtool")
    if found:
        return found
    why = "promtool not found on PATH (apt-get install prometheus)"
    unavailable(why)


def promtool(*args: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    cmd = [find_promtool(), *map(str, args)]
    try:
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{' '.join(cmd)} took over {TIMEOUT_S}s:\n{e.stdout!r}\n{e.stderr!r}")


def assert_ok(out: subprocess.CompletedProcess[str]) -> None:
    assert out.returncode == 0, f"{' '.join(out.args)} exited {out.returncode}:\n{out.stdout}\n{out.stderr}"


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def alert_rules() -> list[dict[str, Any]]:
    return [r for g in load(RULES)["groups"] for r in g["rules"] if "alert" in r]


def metric_families(text: str) -> set[str]:
    return {HISTOGRAM_SUFFIX.sub("", m) for m in METRIC.findall(text)}


# --- promtool --------------------------------------------------------------------------------------------------


def test_promtool_check_config() -> None:
    assert_ok(promtool("check", "config", CONFIG.relative_to(ROOT)))


def test_promtool_check_rules() -> None:
    assert_ok(promtool("check", "rules", RULES.relative_to(ROOT)))


def test_promtool_test_rules() -> None:
    assert_ok(promtool("test", "rules", RULES_TEST.relative_to(ROOT)))


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("> 10\n", "> 30\n"),  # TTFT threshold
        ("llmgw_model_ready_replicas == 0", "llmgw_model_ready_replicas == 1"),
        ("llmgw_store_writes_queued > 1000", "llmgw_store_writes_queued > 0"),
    ],
)
def test_rule_unit_tests_catch_a_changed_rule(tmp_path: Path, old: str, new: str) -> None:
    """The promtool unit tests are not vacuous: a broken rule makes them fail."""
    text = RULES.read_text()
    assert text.count(old) == 1, f"{old!r} no longer in {RULES.name}: update this test"
    (tmp_path / RULES.name).write_text(text.replace(old, new))
    shutil.copy(RULES_TEST, tmp_path / RULES_TEST.name)
    out = promtool("test", "rules", RULES_TEST.name, cwd=tmp_path)
    assert out.returncode != 0, f"promtool test rules still passed with {old!r} -> {new!r}:\n{out.stdout}"


def test_missing_promtool_skips_or_fails(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("LLMGW_REQUIRE_TOOLS", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install prometheus"):
        find_promtool()
    monkeypatch.setenv("LLMGW_REQUIRE_TOOLS", "1")
    with pytest.raises(pytest.fail.Exception, match="apt-get install prometheus"):
        find_promtool()
    monkeypatch.delenv("LLMGW_REQUIRE_TOOLS")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception):
        find_promtool()


# --- metric names ----------------------------------------------------------------------------------------------


def test_metric_families_strips_histogram_suffixes_only() -> None:
    expr = "rate(llmgw_x_seconds_bucket[5m]) + llmgw_x_seconds_sum / llmgw_x_seconds_count + llmgw_requests_total"
    assert metric_families(expr) == {"llmgw_x_seconds", "llmgw_requests_total"}


def test_rules_use_only_exported_metrics() -> None:
    used = set().union(*(metric_families(r["expr"]) for r in alert_rules()))
    assert "llmgw_time_to_first_token_seconds" in used  # the regex and the suffix stripping found the histogram
    assert used - EXPORTED == set(), f"{RULES.name} uses metrics the control plane does not export"


def test_annotations_name_only_exported_metrics() -> None:
    named = set().union(*(metric_families(" ".join(r["annotations"].values())) for r in alert_rules()))
    assert named - EXPORTED == set(), f"{RULES.name}'s annotations point at metrics the control plane does not export"


# --- shape -----------------------------------------------------------------------------------------------------


def test_prometheus_config_scrapes_metrics_listen_and_loads_the_rules() -> None:
    cfg = load(CONFIG)
    assert cfg["global"]["scrape_interval"] == "15s"
    assert cfg["rule_files"] == [RULES.name]
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    assert set(jobs) == {"llmgw"}
    assert jobs["llmgw"].get("metrics_path", "/metrics") == "/metrics"
    assert "admin_listen" in CONFIG.read_text()  # the comment saying why not admin_listen
    down = next(r for r in alert_rules() if r["alert"] == "LlmgwControlPlaneDown")
    assert 'job="llmgw"' in down["expr"]  # the up alert watches the job scraped above


def test_every_alert_has_for_severity_and_runbook() -> None:
    rules = alert_rules()
    assert {r["alert"] for r in rules} == REQUIRED_ALERTS
    for r in rules:
        name = r["alert"]
        assert r.get("for"), f"{name} has no `for:`"
        assert r.get("labels", {}).get("severity") in {"critical", "warning", "info"}, name
        ann = r.get("annotations", {})
        assert ann.get("summary") and ann.get("description"), f"{name} lacks a summary or description"
        assert "`llmgw ctl " in ann["description"], f"{name}'s description names no `llmgw ctl` command to run"


def test_every_alert_has_a_firing_and_a_quiet_unit_test() -> None:
    cases = [c for t in load(RULES_TEST)["tests"] for c in t.get("alert_rule_test", [])]
    for name in REQUIRED_ALERTS:
        mine = [c for c in cases if c["alertname"] == name]
        assert any(c.get("exp_alerts") for c in mine), f"no unit test in {RULES_TEST.name} fires {name}"
        assert any(not c.get("exp_alerts") for c in mine), f"no unit test in {RULES_TEST.name} keeps {name} quiet"
