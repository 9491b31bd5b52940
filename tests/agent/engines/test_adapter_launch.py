"""An engine given LoRA adapters loads them at start: llama-server by index (the router names them so), vLLM by
name, at most a few on the GPU at once; and a shard whose adapter file is missing says so with its code."""

from __future__ import annotations

from pathlib import Path

from llmgw.agent.adapter_files import adapter_paths
from llmgw.agent.engines import LaunchContext
from llmgw.agent.engines.llamacpp import LlamaCpp
from llmgw.agent.engines.vllm import MAX_GPU_LORAS, VLLM
from llmgw.agent.supervisor.supervisor import Pending
from llmgw.core.reasons import Reason
from llmgw.wire.messages import Problem, ShardSpec
from llmgw.wire.serving import AdapterSpec


def _spec(engine: str, n: int) -> ShardSpec:
    return ShardSpec(replica_id="r", model="m", engine=engine, source="/w/m", rank=0, world_size=1, serve_port=9000,
                     adapters=[AdapterSpec(name=f"ft{i}", source=f"/w/ft{i}.gguf") for i in range(n)])


def _ctx(n: int) -> LaunchContext:
    return LaunchContext(binary="/bin/engine", model_path="/w/m", host="10.0.0.1",
                         adapters=tuple(f"/node/ft{i}.gguf" for i in range(n)))


def test_llama_server_loads_every_adapter_in_order_unapplied() -> None:
    argv = LlamaCpp().launch(_spec("llamacpp", 2), _ctx(2)).argv
    at = argv.index("--lora")
    assert argv[at:at + 5] == ["--lora", "/node/ft0.gguf", "--lora", "/node/ft1.gguf", "--lora-init-without-apply"]
    assert "--lora" not in LlamaCpp().launch(_spec("llamacpp", 0), _ctx(0)).argv


def test_vllm_names_each_adapter_and_bounds_those_on_the_gpu() -> None:
    n = MAX_GPU_LORAS + 2
    argv = VLLM().launch(_spec("vllm", n), _ctx(n)).argv
    at = argv.index("--enable-lora")
    assert argv[at + 1:at + 3 + n] == ["--lora-modules", *(f"ft{i}=/node/ft{i}.gguf" for i in range(n)),
                                       "--max-loras"]
    assert argv[at + 3 + n:at + 6 + n] == [str(MAX_GPU_LORAS), "--max-cpu-loras", str(n)]
    assert "--enable-lora" not in VLLM().launch(_spec("vllm", 0), _ctx(0)).argv


def test_a_missing_adapter_file_fails_the_shard_with_its_name(tmp_path: Path) -> None:
    there = tmp_path / "ft0.gguf"
    there.write_bytes(b"GGUF" + b"\0" * 16)
    spec = _spec("llamacpp", 0).model_copy(update={"adapters": [
        AdapterSpec(name="ft0", source=str(there)), AdapterSpec(name="ft1", source=str(tmp_path / "gone.gguf"))]})
    got = adapter_paths(spec, None)  # type: ignore[arg-type]  # no remote source: the fetcher is never asked
    assert isinstance(got, Problem) and not isinstance(got, Pending)
    assert got.code == Reason.AdapterFailed and got.message.startswith("adapter ft1: weights not found")
    only = spec.model_copy(update={"adapters": spec.adapters[:1]})
    assert adapter_paths(only, None) == (str(there),)  # type: ignore[arg-type]
