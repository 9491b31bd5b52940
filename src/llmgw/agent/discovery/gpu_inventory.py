"""A simulated node's GPUs, read from an inventory file instead of NVML (its format: docs/node-onboarding.md).
Problems name the file and the key path, like every config file."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from llmgw.agent.discovery.gpu_class import gpu_class
from llmgw.agent.discovery.gpu_probe import GpuProbe
from llmgw.config.loader import load
from llmgw.core.strict import Strict
from llmgw.wire.messages import GPU, MigInstance

# NVIDIA's words for the Xids that take a card out of service (from the Xid catalog), so a simulated fault reads
# like a real one.
XID_WORDS = {
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors",
    48: "Double Bit ECC Error",
    61: "Internal micro-controller breakpoint/warning",
    62: "Internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLink Error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    119: "Timeout waiting for the GSP",
    120: "GSP error",
}


class InventoryGPU(Strict):
    index: int = Field(ge=0)
    name: str = Field(min_length=1)
    memory_mib: int = Field(ge=0)
    uuid: str = ""
    faulty: bool = False
    fault: str = ""
    xid: int | None = Field(default=None, ge=0)
    nvlink_peers: list[int] | None = None
    mig: list[MigInstance] | None = Field(default=None, max_length=64)

    def fault_words(self) -> str:
        if self.xid is not None:
            return f"Xid {self.xid}: {self.fault or XID_WORDS.get(self.xid, 'see the NVIDIA Xid catalog')}"
        if self.fault:
            return self.fault
        return "marked faulty in the inventory" if self.faulty else ""


class Inventory(Strict):
    driver: str = ""
    cuda: str = ""
    gpus: list[InventoryGPU] = []

    @model_validator(mode="after")
    def _consistent(self) -> Inventory:
        indices = [g.index for g in self.gpus]
        seen: set[int] = set()
        for i in indices:
            if i in seen:
                raise ValueError(f"gpus: index {i} appears twice")
            seen.add(i)
        by_index = {g.index: g for g in self.gpus}
        for pos, g in enumerate(self.gpus):
            for peer in g.nvlink_peers or []:
                if peer == g.index or peer not in by_index:
                    raise ValueError(f"gpus[{pos}].nvlink_peers: {peer} is not another card in this inventory")
                # NVLink is a cable between two cards: a one-sided entry is a typo in the file
                other = by_index[peer].nvlink_peers
                if other is not None and g.index not in other:
                    raise ValueError(
                        f"gpus[{pos}].nvlink_peers: card {g.index} lists {peer}, "
                        f"but card {peer} does not list {g.index}"
                    )
        return self


def to_gpu(card: InventoryGPU) -> GPU:
    words = card.fault_words()
    return GPU(
        index=card.index,
        uuid=card.uuid,
        name=card.name,
        gpu_class=gpu_class(card.name, card.memory_mib),
        memory_mib=card.memory_mib,
        faulty=bool(words),
        fault=words,
        nvlink_peers=sorted(card.nvlink_peers) if card.nvlink_peers is not None else None,
        mig=card.mig,
    )


def probe_inventory(path: Path) -> GpuProbe:
    """Raises ConfigError, naming the file and key, when the inventory is unreadable or invalid."""
    inventory = load(Inventory, path)
    gpus = sorted((to_gpu(card) for card in inventory.gpus), key=lambda g: g.index)
    return GpuProbe(source="inventory", driver=inventory.driver, cuda=inventory.cuda, gpus=gpus)
