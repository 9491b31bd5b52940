"""Hardware discovery: small probes, each reading the machine through a HostRoot.

Missing hardware or missing NVIDIA software is an answer (zero cards, no adapters), not a failure. Failures that
are not absence raise DiscoveryError (an unreadable /proc file) or ConfigError (an invalid GPU inventory).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pynvml  # type: ignore[import-untyped]

from llmgw.agent.discovery.commands import CommandResult, CommandRunner, run_command
from llmgw.agent.discovery.cpu import probe_cpu
from llmgw.agent.discovery.fabrics import DeclaredFabric, FabricDeclaration, check_fabrics
from llmgw.agent.discovery.gpu_class import gpu_class
from llmgw.agent.discovery.gpu_nvml import NvmlApi
from llmgw.agent.discovery.gpu_probe import GpuProbe
from llmgw.agent.discovery.gpus import probe_gpus
from llmgw.agent.discovery.hostroot import HostRoot
from llmgw.agent.discovery.infiniband import probe_adapters
from llmgw.agent.discovery.memory import probe_memory
from llmgw.agent.discovery.system import probe_arch, probe_disk, probe_glibc, probe_os
from llmgw.agent.discovery.warnings import hardware_warnings
from llmgw.wire.messages import Hardware

__all__ = [
    "CommandResult",
    "CommandRunner",
    "DeclaredFabric",
    "FabricDeclaration",
    "GpuProbe",
    "HostRoot",
    "NvmlApi",
    "check_fabrics",
    "discover",
    "gpu_class",
    "hardware_warnings",
    "probe_gpus",
]

log = logging.getLogger(__name__)


def discover(
    root: HostRoot,
    *,
    inventory: Path | None,
    weights_dir: Path | None,
    default_arch: str,
    run: CommandRunner | None = None,
    nvml: NvmlApi | None = None,
) -> Hardware:
    """Everything this node has. `run` defaults to running programs for real, `nvml` to the pynvml module.

    Fabrics are not here: they are configuration checked against `ib_adapters` by check_fabrics.
    """
    gpus = probe_gpus(inventory=inventory, nvml=nvml if nvml is not None else pynvml, run=run or run_command)
    for problem in gpus.problems:
        log.warning("GPU discovery: %s", problem)
    memory = probe_memory(root)
    return Hardware(
        arch=probe_arch(root, default_arch),
        os=probe_os(root),
        cpu=probe_cpu(root),
        mem_total_bytes=memory.total_bytes,
        mem_available_bytes=memory.available_bytes,
        disk=probe_disk(weights_dir),
        gpu_source=gpus.source,
        nvidia_driver=gpus.driver,
        nvidia_cuda=gpus.cuda,
        glibc=probe_glibc(root),
        gpus=gpus.gpus,
        gpu_problems=list(gpus.problems),
        ib_adapters=probe_adapters(root),
    )
