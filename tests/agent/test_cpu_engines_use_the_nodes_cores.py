"""llama.cpp computing on the CPU (its CPU build, or the layers a GPU build leaves there) uses the node's cores: the
cores the agent may use by default (its CPU affinity), or agent.yaml `engine_threads`; never one thread."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from llmgw.agent.agent import Agent
from llmgw.core.clock import FakeClock
from llmgw.wire.messages import EngineStatus, ShardSpec
from tests.agent.test_agent_report import config


def threads_of(tmp_path: Path, **agent: object) -> str:
    cfg = config(tmp_path, "h100x8-ib2", []).model_copy(update=agent)
    a = Agent(cfg, FakeClock())
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    a.engines = [EngineStatus(name="llamacpp", version="b1", path="/opt/llama/llama-server", runs=True,
                              variant="cpu-x86_64")]
    spec = ShardSpec(replica_id="m-1", model="m", engine="llamacpp", source=str(model), rank=0, world_size=1,
                     serve_port=20000)
    launch, why = a.resolve(spec)
    assert launch is not None, why
    return launch.argv[launch.argv.index("-t") + 1]


def test_the_cores_the_agent_may_use_by_default(tmp_path: Path) -> None:
    assert threads_of(tmp_path) == str(len(os.sched_getaffinity(0)))


@pytest.mark.parametrize("n", [1, 48])
def test_engine_threads_says_otherwise(tmp_path: Path, n: int) -> None:
    assert threads_of(tmp_path, engine_threads=n) == str(n)
