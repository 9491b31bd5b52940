"""Every bench in bench/ runs in its smoke mode (`--smoke`: a few seconds on scaled-down figures), so a change to an
interface a bench uses fails here instead of when someone next tries to reproduce a table in docs/benchmarks.md.

Each runs as `python -m bench.NAME --smoke` in a process of its own, as a person would run it; a bench exits non-zero
when a request it sent failed or a figure could not be computed, and its table must be printed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# bench module -> a line of its table that a run which measured something prints
BENCHES = {
    "adapters": "adapter work alone",
    "chargeback": "worst |GPU share / work share - 1|",
    "coldstart": "overhead beyond the engine's load",
    "wake": "request to first token, wake",
    "dashboard": "/metrics",
    "fetch": "peer:   llmgw / curl",
    "gate": "through the tunnel",
    "heartbeats": "reconcile pass",
    "placement": "(snapshot build)",
    "reconcile_record": "recording digest",
    "router": "llmgw router",
    "router_ab": "B/A us/req",
    "routing": "prefix",
    "routing_llama": "prefix",
}
# modules that are not benches of their own: servers the router bench starts (its smoke run starts both) and its
# parts (its servers, its router, its load generator, CPU accounting, report), the fetch bench's directory case,
# the heartbeat bench's load generator and servers, the reconcile recording's recorder
PARTS = {"standin": "router", "bare_proxy": "router", "router_servers": "router", "router_llmgw": "router",
         "router_load": "router", "router_cpu": "router", "router_report": "router", "fetch_dir": "fetch",
         "heartbeat_load": "heartbeats", "heartbeat_servers": "heartbeats", "recording": "reconcile_record"}
# benches a script runs, given what the script built: each is run, through its script, by the test named here
SCRIPTED = {"gpu_check": "tests/scripts/test_gpu_check.py"}
# what the benches share with the tests (the allocator of addresses and ports, a PostgreSQL of a run's own):
# exercised by the tests, which import them through the module named here
SHARED = {"addresses": "tests/harness.py", "postgres": "tests/pg.py"}
SMOKE_TIMEOUT_S = 240  # a smoke run takes seconds; this bounds a hung one on a loaded machine


def test_every_bench_module_has_a_smoke_run() -> None:
    modules = {p.stem for p in (REPO / "bench").glob("*.py")} - {"__init__"}
    assert modules == set(BENCHES) | set(PARTS) | set(SCRIPTED) | set(SHARED), \
        "a new module in bench/: add its smoke run to BENCHES (or PARTS, or SCRIPTED, or SHARED)"
    assert set(PARTS.values()) <= set(BENCHES)
    assert all((REPO / test).is_file() for test in [*SCRIPTED.values(), *SHARED.values()])


@pytest.mark.parametrize("name", sorted(BENCHES))
def test_bench_smoke_mode_runs(name: str, tmp_path: Path) -> None:
    path = os.pathsep.join([str(REPO), str(REPO / "src"), os.environ.get("PYTHONPATH", "")])
    try:
        done = subprocess.run([sys.executable, "-m", f"bench.{name}", "--smoke"], cwd=tmp_path,
                              env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True,
                              timeout=SMOKE_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"bench.{name} --smoke still running after {SMOKE_TIMEOUT_S}s: {e.stdout!r} {e.stderr!r}")
    out = done.stdout + done.stderr
    assert done.returncode == 0, f"bench.{name} --smoke exited {done.returncode}:\n{out[-4000:]}"
    assert BENCHES[name] in done.stdout, f"bench.{name} --smoke printed no table:\n{out[-4000:]}"
