"""Intervals that would stop a process (a division by zero, a loop that never sleeps) or make no sense (a node
lost between two of its heartbeats) are refused when the config is checked, with the key and the reason."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from llmgw.config.agent import AgentConfig
from llmgw.config.loader import load
from llmgw.config.server import ServerConfig
from llmgw.core.errors import ConfigError

BASE = "tls: {ca: ca.crt, cert: c.crt, key: c.key}\n"
AGENT = "control_planes: [https://cp:7443]\ntls: {ca: a, cert: b, key: c}\n"


def _refused(tmp: Path, kind: type[ServerConfig] | type[AgentConfig], text: str) -> str:
    p = tmp / "c.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError) as e:
        load(kind, p)
    return str(e.value)


@pytest.mark.parametrize("line, says", [
    ("heartbeat_interval: 0s", "heartbeat_interval: must be at least 0.1s"),
    ("heartbeat_interval: -1", "heartbeat_interval: must be at least 0.1s"),
    ("heartbeat_interval: 2h", "heartbeat_interval: must be at most 60s"),
    ("heartbeat_interval: 30s\nnode_lost_after: 20s", "must be shorter than node_lost_after"),
    ("reconcile_interval: 0s", "reconcile_interval: must be at least 0.01s"),
    ("leader_lease: 0s", "leader_lease: must be at least 0.3s"),
    ("node_lost_after: 0s", "node_lost_after: must be at least"),
    ("router: {usage_flush_interval: 0s}", "router.usage_flush_interval: must be at least 0.01s"),
])
def test_a_server_interval_that_cannot_work_is_refused(tmp_path: Path, line: str, says: str) -> None:
    assert says in _refused(tmp_path, ServerConfig, BASE + line + "\n")


@pytest.mark.parametrize("line, says", [
    ("heartbeat_interval: 0s", "heartbeat_interval: must be at least 0.1s"),
    ("heartbeat_interval: 1h", "heartbeat_interval: must be at most 60s"),
    ("request_timeout: 0s", "request_timeout: must be"),
])
def test_an_agent_interval_that_cannot_work_is_refused(tmp_path: Path, line: str, says: str) -> None:
    assert says in _refused(tmp_path, AgentConfig, AGENT + line + "\n")


@pytest.mark.real  # processes (tests/tiers.py)
def test_server_check_refuses_a_zero_heartbeat(tmp_path: Path) -> None:
    """`llmgw server --check` refuses a config the server would die on at start."""
    p = tmp_path / "server.yaml"
    p.write_text(BASE + "heartbeat_interval: 0s\n")
    r = subprocess.run([sys.executable, "-m", "llmgw.cli.main", "server", "--check", "-c", str(p)],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode != 0 and "heartbeat_interval" in r.stdout + r.stderr, (r.returncode, r.stdout, r.stderr)
