"""The default engine builds each real NVIDIA machine takes, from its own `nvidia-smi -q -x`: the driver the
output names decides, for all three engines, between a CUDA 13 build, a CUDA 12 one (the long-term-support
branches most datacenters run: R535, R550, R570), Vulkan (llama.cpp) or the CPU build (vLLM). SGLang, CUDA only and
with no CUDA 12 build of 0.5.23, has none below a 580 driver. Every build passed over says why, in both versions.
(The C library is given: 2.39, an Ubuntu 24.04 node.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from llmgw.config.engines import LLAMACPP_DEFAULT, SGLANG_DEFAULT, VLLM_DEFAULT
from llmgw.core.reasons import Reason
from llmgw.wire.builds import NodeFacts, choose_build

from .test_real_nvidia_smi_outputs import discover_with

pytestmark = pytest.mark.real  # processes: a fake nvidia-smi run through the real command runner

ENGINES = {"llamacpp": LLAMACPP_DEFAULT, "vllm": VLLM_DEFAULT, "sglang": SGLANG_DEFAULT}
# each engine's build and how many better ones it passed over (all DriverTooOld); vLLM's and SGLang's CUDA 13 builds
# are the registry's (`cuda-`), vLLM's CUDA 12 one its +cu129 wheel; SGLang's CUDA 12 lane ended before 0.5.23
Takes = dict[str, tuple[str | None, int]]
NEW: Takes = {"llamacpp": ("cuda13-x86_64", 0), "vllm": ("cuda-x86_64", 0), "sglang": ("cuda-x86_64", 0)}
LTS: Takes = {"llamacpp": ("cuda12-x86_64", 1), "vllm": ("cuda12-x86_64", 1), "sglang": (None, 1)}
OLD: Takes = {"llamacpp": ("vulkan-x86_64", 2), "vllm": ("cpu-x86_64", 2), "sglang": (None, 1)}
# output: (its driver, what each engine takes there)
TAKES: dict[str, tuple[str, Takes]] = {
    "rtx-pro-6000-blackwell.xml": ("590.44.01", NEW),  # CUDA 13.1
    "rtx-4000-sff-ada.xml": ("595.84", NEW),  # CUDA 13.2
    "rtx-4000-sff-ada-driver-580-derived.xml": ("580.95.05", NEW),  # CUDA 13.0: the oldest that runs 13
    "a100-sxm4-80gb-mig-driver-570-derived.xml": ("570.172.08", LTS),  # CUDA 12.8
    "a100-sxm4-80gb-mig-driver-550-derived.xml": ("550.163.01", LTS),  # CUDA 12.4
    "a100-sxm4-80gb-mig.xml": ("535.54.03", LTS),  # CUDA 12.2
    "rtx-3090.xml": ("525.147.05", LTS),  # CUDA 12.0: the oldest that runs 12
    "a10g.xml": ("515.105.01", OLD),  # CUDA 11.7
    "gtx-1660-ti.xml": ("418.43", OLD),
}


@pytest.mark.parametrize("output", sorted(TAKES))
def test_a_real_machine_takes_the_gpu_build_its_driver_runs(
    output: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hw = discover_with(output, tmp_path, monkeypatch)
    driver, takes = TAKES[output]
    assert hw.nvidia_driver == driver, "the NVIDIA driver read from the output"
    node = NodeFacts(arch="x86_64", nvidia_driver=hw.nvidia_driver, nvidia_cuda=hw.nvidia_cuda, glibc="2.39")
    for name, source in ENGINES.items():
        choice = choose_build(source, node)
        got = choice.variant.variant if choice.variant else None
        want, passed = takes[name]
        assert got == want, (name, choice)
        assert [p.reason for p in choice.passed_over] == [Reason.DriverTooOld] * passed, (name, choice)
        for p in choice.passed_over:
            assert hw.nvidia_driver in p.message, p.message  # the node's own version, beside the one needed
            assert "needs an NVIDIA driver of" in p.message or "runs CUDA up to" in p.message, p.message
        if got == "cpu-x86_64":
            assert "the CPU build cpu-x86_64 is used (a fallback)" in choice.note, choice.note
        if got is None:
            assert choice.note.startswith(f"no build of {name} "), choice.note
