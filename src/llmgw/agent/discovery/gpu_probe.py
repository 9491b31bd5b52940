"""What a GPU source reports: the cards, where they were seen, and what went wrong on the way."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from llmgw.wire.messages import GPU

GpuSource = Literal["nvml", "nvidia-smi", "inventory", "none"]


@dataclass(frozen=True)
class GpuProbe:
    source: GpuSource
    driver: str = ""
    cuda: str = ""  # the newest CUDA the driver supports, "12.2"
    gpus: list[GPU] = field(default_factory=list)
    # The machine's words for anything that is not plain absence ("nvidia-smi exited 18: Failed to initialize
    # NVML: Driver/library version mismatch"), so a node reporting zero cards can say why.
    problems: list[str] = field(default_factory=list)
