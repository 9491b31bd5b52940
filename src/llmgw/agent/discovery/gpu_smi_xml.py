"""Reading `nvidia-smi -q -x`: the cards, their MIG instances and their health, as nvidia-smi words them.

The XML's schema has changed with every driver branch (nvsmi_device_v6 to v13 and on): fields come and go, values
read "N/A" where a card does not support something, and a field one card has is absent on another. Every lookup
here is therefore optional, and a missing or unreadable field means "not said", never a failure.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from pydantic import ValidationError

from llmgw.agent.discovery.gpu_class import gpu_class
from llmgw.wire.messages import GPU, MigInstance

# nvidia-smi's XML for 8 cards is about 600 KB; anything far larger is not nvidia-smi.
MAX_XML_BYTES = 16 * 2**20
MAX_GPUS = 1024
MAX_MIG = 64
# What a card in trouble says in place of a value.
_UNSAID = {"", "n/a", "[n/a]", "unknown error", "not supported", "[not supported]", "not found"}
# nvidia-smi's own words for a card that needs nothing done (gpu_recovery_action, drivers 550 and later).
_NO_ACTION = {"none", "n/a"}
_MIB = re.compile(r"^\s*(\d+)\s*MiB\s*$")


class SmiXmlError(ValueError):
    """The output is not nvidia-smi's XML (or is hostile); the message says why, in a few words."""


@dataclass
class SmiLog:
    driver: str = ""
    cuda: str = ""
    gpus: list[GPU] = field(default_factory=list)


def _text(node: ET.Element | None, path: str) -> str:
    found = node.find(path) if node is not None else None
    text = (found.text or "").strip() if found is not None else ""
    return "" if text.lower() in _UNSAID else text


def _mib(node: ET.Element | None, path: str) -> int:
    m = _MIB.match(_text(node, path))
    return int(m.group(1)) if m else 0


def _count(text: str) -> int:
    return int(text) if text.isdigit() else 0


def _yes(node: ET.Element, path: str) -> bool:
    return _text(node, path).lower() == "yes"


def _uncorrectable_now(gpu: ET.Element) -> int:
    """Uncorrectable ECC errors since the driver loaded. The tags differ by schema: double_bit/total (up to v11),
    sram_uncorrectable and dram_uncorrectable (v12), sram_uncorrectable_parity/_secded (v13)."""
    volatile = gpu.find("ecc_errors/volatile")
    if volatile is None:
        return 0
    total = _count(_text(volatile, "double_bit/total"))
    for child in volatile:
        if "uncorrectable" in child.tag:
            total += _count((child.text or "").strip())
    return total


def faults(gpu: ET.Element) -> list[str]:
    """What makes this card unfit until a reset or service, in nvidia-smi's terms (the same words NVML's reading
    gives, so a node reads alike from either source)."""
    found = []
    # driver 430 words it pending_blacklist only; 410 and 418 say pending_retirement; 513 and later say both
    if _yes(gpu, "retired_pages/pending_retirement") or _yes(gpu, "retired_pages/pending_blacklist"):
        found.append("retired pages pending: reset the GPU to retire them")
    if _yes(gpu, "remapped_rows/remapped_row_failure"):
        found.append("row remapping failure: the card needs service")
    elif _yes(gpu, "remapped_rows/remapped_row_pending"):
        found.append("row remapping pending: reset the GPU to apply it")
    uncorrectable = _uncorrectable_now(gpu)
    if uncorrectable:
        found.append(f"{uncorrectable} uncorrectable ECC error(s) since the driver loaded")
    action = _text(gpu, "gpu_recovery_action")
    if action and action.lower() not in _NO_ACTION:
        found.append(f"nvidia-smi asks for recovery: {action}")
    elif _yes(gpu, "gpu_reset_status/reset_required"):
        found.append("nvidia-smi: reset required")
    return found


def mig_instances(gpu: ET.Element) -> list[MigInstance] | None:
    """The card's MIG instances; None when MIG mode is not on (off, or a card without MIG)."""
    if _text(gpu, "mig_mode/current_mig").lower() != "enabled":
        return None
    instances = []
    for dev in gpu.findall("mig_devices/mig_device")[:MAX_MIG]:
        instances.append(
            MigInstance(
                gpu_instance=_count(_text(dev, "gpu_instance_id")),
                compute_instance=_count(_text(dev, "compute_instance_id")),
                memory_mib=_mib(dev, "fb_memory_usage/total"),
                multiprocessors=_count(_text(dev, "device_attributes/shared/multiprocessor_count")),
            )
        )
    return instances


def _card(index: int, gpu: ET.Element) -> GPU:
    name = _text(gpu, "product_name") or "unknown NVIDIA GPU"
    memory_mib = _mib(gpu, "fb_memory_usage/total")
    words = faults(gpu)
    said = (gpu.findtext("product_name") or "").strip()
    if said.strip("[]").lower() == "unknown error":  # the driver counts the card and cannot describe it
        words.insert(0, f"nvidia-smi cannot describe the card: {said[:128]}")
    return GPU(
        index=index,
        uuid=_text(gpu, "uuid")[:128],
        name=name[:128],
        gpu_class=gpu_class(name, memory_mib)[:128],
        memory_mib=memory_mib,
        faulty=bool(words),
        fault="; ".join(words)[:2048],
        mig=mig_instances(gpu),
    )


def parse_smi_xml(text: str) -> SmiLog:
    """Cards in nvidia-smi's order, which is NVML's index order. Raises SmiXmlError for anything else."""
    if len(text) > MAX_XML_BYTES:
        raise SmiXmlError(f"output of {len(text)} bytes is too large to be nvidia-smi's")
    if "<!ENTITY" in text:
        raise SmiXmlError("output declares XML entities; nvidia-smi never does")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise SmiXmlError(f"not XML ({e})") from None
    if root.tag != "nvidia_smi_log":
        raise SmiXmlError(f"not nvidia-smi's XML (root <{root.tag[:40]}>)")
    cards = root.findall("gpu")
    if len(cards) > MAX_GPUS:
        raise SmiXmlError(f"{len(cards)} cards is more than a node can hold")
    gpus = []
    for i, gpu in enumerate(cards):
        try:
            gpus.append(_card(i, gpu))
        except ValidationError as e:  # a value no card has (memory of 10^30 MiB): not nvidia-smi's output
            first = e.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise SmiXmlError(f"card {i}: {where}: {first['msg']}") from None
    return SmiLog(driver=_text(root, "driver_version")[:128], cuda=_text(root, "cuda_version")[:128], gpus=gpus)
