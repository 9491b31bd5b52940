"""A gated shard starts its engine first, then imports its gate's modules and opens its listeners, so the engine
loads meanwhile: before, the gate's imports (its web stack and TLS, about a third of a second of a core) came
before the engine started, and every cold start waited for them (bench.coldstart: 0.58 s of overhead beyond the
engine's load against 0.30 s after, docs/benchmarks.md). A gate that cannot open still stops its engine and exits 1.
Real processes: the gated module as the agent runs it, an engine that notes when it started, a port already taken."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.harness import alive, wait_until


def test_the_engine_starts_before_the_gate_and_stops_when_the_gate_cannot_open(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    started, pid_file = tmp_path / "started", tmp_path / "pid"
    engine = ["sh", "-c", f"echo $$ > {pid_file}; touch {started}; exec sleep 60"]
    try:
        r = subprocess.run([sys.executable, "-m", "llmgw.agent.gated", "--listen", f"127.0.0.1:{port}",
                            "--upstream", "http://127.0.0.1:9", "--", *engine],
                           capture_output=True, text=True, timeout=60, env={**os.environ, "LLMGW_GATE_KEY": "k"})
    finally:
        taken.close()
    assert r.returncode == 1 and "cannot open the gate" in r.stderr, r.stderr
    assert started.exists(), "the engine was not started before the gate opened"
    pid = int(pid_file.read_text())
    wait_until(lambda: not alive(pid), 10, "the engine stopped with its gate")
