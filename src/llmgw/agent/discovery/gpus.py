"""Which GPUs this node has: a simulated inventory when configured, else NVML, else nvidia-smi, else none."""

from __future__ import annotations

from pathlib import Path

from llmgw.agent.discovery.commands import CommandRunner
from llmgw.agent.discovery.gpu_inventory import probe_inventory
from llmgw.agent.discovery.gpu_nvml import NvmlApi, probe_nvml
from llmgw.agent.discovery.gpu_probe import GpuProbe
from llmgw.agent.discovery.gpu_smi import probe_nvidia_smi


def probe_gpus(*, inventory: Path | None, nvml: NvmlApi, run: CommandRunner) -> GpuProbe:
    """The first source that answers. Missing NVIDIA software means zero cards, never a failed discovery.

    An inventory is configuration: when it is set it is the truth for this node, and an invalid one raises
    ConfigError rather than quietly falling back to whatever cards the host really has.
    """
    if inventory is not None:
        return probe_inventory(inventory)
    from_nvml = probe_nvml(nvml)
    if from_nvml.source != "none":
        return from_nvml
    from_smi = probe_nvidia_smi(run)
    # Keep NVML's complaint: it often explains why nvidia-smi failed too.
    problems = from_nvml.problems + from_smi.problems
    return GpuProbe(
        source=from_smi.source, driver=from_smi.driver, cuda=from_smi.cuda, gpus=from_smi.gpus, problems=problems
    )
