"""A small LoRA adapter for the shipped SmolLM2, written with the gguf library (llama.cpp's own, a development
dependency): `llmgw dev` serves one so a newcomer sees an adapter served as a model, and the tests make theirs
with it. Its weights are random, strong enough to change the base's answers, not to teach it anything."""

from __future__ import annotations

from pathlib import Path

RANK = 8
TARGETS = ("attn_q.weight", "attn_v.weight")  # the usual LoRA targets: the attention's query and value


def make_adapter(base: Path, out: Path, seed: int = 1, strength: float = 0.15) -> Path:
    """A GGUF LoRA adapter (general.type "adapter") of rank RANK over the base's attention query and value
    matrices, shaped after the base's own tensors. Written to a temporary name and renamed: never half a file."""
    import gguf  # a development dependency: only `llmgw dev` and the tests write adapters
    import numpy as np

    reader = gguf.GGUFReader(base)
    arch = reader.fields["general.architecture"]
    part = out.with_name(out.name + ".part")
    writer = gguf.GGUFWriter(part, bytes(arch.parts[arch.data[0]]).decode())
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
    part.replace(out)
    return out
