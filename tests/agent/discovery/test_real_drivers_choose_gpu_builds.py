"""The default engine builds each real NVIDIA machine takes, from its own `nvidia-smi -q -x`: the driver the
output names decides between llama.cpp's CUDA 13 and 12 archives and Vulkan, and vLLM's CUDA build or its CPU one;
every build passed over says why, in both versions. (The C library is given: 2.39, an Ubuntu 24.04 node.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from llmgw.config.engines import LLAMACPP_DEFAULT, VLLM_DEFAULT
from llmgw.wire.builds import NodeFacts, choose_build

from .test_real_nvidia_smi_outputs import discover_with

pytestmark = pytest.mark.real  # processes: a fake nvidia-smi run through the real command runner

# output: (llama.cpp build, vLLM build, reasons llama.cpp passed over)
TAKES = {
    "rtx-pro-6000-blackwell.xml": ("cuda13-x86_64", "cuda-x86_64", []),  # 590.44.01, CUDA 13.1
    "rtx-4000-sff-ada.xml": ("cuda13-x86_64", "cuda-x86_64", []),  # 595.84
    # 535.54.03, CUDA 12.2: llama.cpp's CUDA 12 archive; vLLM's wheels are CUDA 13 (torch +cu130): its CPU build
    "a100-sxm4-80gb-mig.xml": ("cuda12-x86_64", "cpu-x86_64", ["DriverTooOld"]),
    "rtx-3090.xml": ("cuda12-x86_64", "cpu-x86_64", ["DriverTooOld"]),  # 525.147.05: the oldest that runs 12
    "a10g.xml": ("vulkan-x86_64", "cpu-x86_64", ["DriverTooOld", "DriverTooOld"]),  # 515.105.01, CUDA 11.7
    "gtx-1660-ti.xml": ("vulkan-x86_64", "cpu-x86_64", ["DriverTooOld", "DriverTooOld"]),  # 418.43
}


@pytest.mark.parametrize("output", sorted(TAKES))
def test_a_real_machine_takes_the_gpu_build_its_driver_runs(
    output: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hw = discover_with(output, tmp_path, monkeypatch)
    assert hw.nvidia_driver, "an NVIDIA driver read from the output"
    node = NodeFacts(arch="x86_64", nvidia_driver=hw.nvidia_driver, nvidia_cuda=hw.nvidia_cuda, glibc="2.39")
    llama, vllm, reasons = TAKES[output]
    choice = choose_build(LLAMACPP_DEFAULT, node)
    assert choice.variant is not None and choice.variant.variant == llama
    assert [p.reason for p in choice.passed_over] == reasons
    for p in choice.passed_over:
        assert hw.nvidia_driver in p.message, p.message  # the node's own version, beside the one needed
    picked = choose_build(VLLM_DEFAULT, node)
    assert picked.variant is not None and picked.variant.variant == vllm
    if vllm.startswith("cpu-"):
        assert "the CPU build cpu-x86_64 is used (a fallback)" in picked.note
