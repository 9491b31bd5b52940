"""The servers the router bench measures, each a child process of its own on a free loopback port, started and
always stopped (by PID, in reverse order) by this process, and LiteLLM's configuration for (d)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from bench.addresses import free_port

REPO = Path(__file__).resolve().parent.parent
MODEL = "bench"
LITELLM_KEY = "sk-bench-litellm-master"
LITELLM_HOWTO = (
    "python3.11 -m venv .bench-venv && .bench-venv/bin/pip install 'litellm[proxy]'\n"
    "  (the bench runs it with LITELLM_LOCAL_MODEL_COST_MAP=True, so it needs no network)"
)


@dataclass
class Server:
    name: str
    proc: subprocess.Popen[bytes]
    base: str
    log: Path
    headers: dict[str, str] = field(default_factory=dict)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


class Servers:
    """Starts servers as child processes and always stops them, by PID, in reverse order."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.running: list[Server] = []

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None,
              cwd: Path = REPO) -> tuple[Server, int]:
        """Start `argv` in `cwd` with {port} replaced by a free port and {standin} by the first server's base URL."""
        port = free_port()
        if self.running:
            argv = [a.replace("{standin}", self.running[0].base) for a in argv]
        log = self.tmp / f"{name.replace(' ', '_')}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [a.replace("{port}", str(port)) for a in argv],
                cwd=cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})},
            )
        srv = Server(name, proc, f"http://127.0.0.1:{port}", log)
        self.running.append(srv)
        return srv, port

    def stop(self, srv: Server) -> None:
        srv.stop()
        self.running.remove(srv)

    def stop_all(self) -> None:
        for srv in reversed(self.running):
            srv.stop()
        self.running.clear()


async def wait_up(srv: Server, path: str, timeout: float) -> None:
    """Until the server answers anything at all over HTTP; fail with its log tail if it exits or takes too long."""
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as s:
        while True:
            if srv.proc.poll() is not None:
                raise RuntimeError(f"{srv.name} exited with {srv.proc.returncode}:\n{tail(srv.log)}")
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with s.get(srv.base + path) as r:
                    await r.read()
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{srv.name} not answering after {timeout:.0f}s:\n{tail(srv.log)}")
            await asyncio.sleep(0.1)


def tail(log: Path, n: int = 20) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def litellm_config(tmp: Path, upstream: str) -> Path:
    cfg = tmp / "litellm.yaml"
    cfg.write_text(
        "model_list:\n"
        f"  - model_name: {MODEL}\n"
        "    litellm_params:\n"
        f"      model: openai/{MODEL}\n"
        f"      api_base: {upstream}/v1\n"
        "      api_key: unused\n"
        "general_settings:\n"
        f"  master_key: {LITELLM_KEY}\n"
        "litellm_settings:\n"
        "  telemetry: false\n"
    )
    return cfg


@contextlib.contextmanager
def servers() -> Iterator[Servers]:
    tmp = Path(tempfile.mkdtemp(prefix="llmgw-bench-"))
    s = Servers(tmp)
    try:
        yield s
    finally:
        s.stop_all()
        shutil.rmtree(tmp, ignore_errors=True)

