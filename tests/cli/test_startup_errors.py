"""A config typo stops startup with the key named, before anything listens."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from tests.harness import free_port


def test_server_typo_exits_2_naming_the_key_and_never_listens(tmp_path: Path) -> None:
    port = free_port()
    cfg = tmp_path / "server.yaml"
    cfg.write_text(f"api_listen: 127.0.0.1:{port}\ntls: {{ca: a, cert: b, key: c}}\nmodels:\n"
                   "  - {name: m, source: x, engine: sim, scaling: {min: 1, maxx: 2}}\n")
    r = subprocess.run([sys.executable, "-m", "llmgw.cli.main", "server", "-c", str(cfg)], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2
    assert f"{cfg}: models[0].scaling.maxx: unknown key" in r.stderr
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_missing_tls_files_are_named_before_listening(tmp_path: Path) -> None:
    port = free_port()
    cfg = tmp_path / "server.yaml"
    cfg.write_text(f"api_listen: 127.0.0.1:{port}\ntls: {{ca: nope/ca.crt, cert: nope/c.crt, key: nope/c.key}}\n")
    r = subprocess.run([sys.executable, "-m", "llmgw.cli.main", "server", "-c", str(cfg)], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2
    assert "nope/c.crt" in r.stderr


def test_agent_typo_exits_2(tmp_path: Path) -> None:
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("control_planes: [https://127.0.0.1:1]\ntls: {ca: a, cert: b, key: c}\n"
                   "fabrics:\n  - {nmae: ib-a, adapters: [mlx5_0]}\n")
    r = subprocess.run([sys.executable, "-m", "llmgw.cli.main", "agent", "-c", str(cfg)], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2
    assert f"{cfg}: fabrics[0].name: field required" in r.stderr
    assert f"{cfg}: fabrics[0].nmae: unknown key" in r.stderr
