"""GPUs through NVML (pynvml): the only source that knows card health and the NVLink topology.

Every pynvml call goes through `_call`, which turns pynvml's exceptions into `_NvmlError` carrying NVML's code
and words; nothing from pynvml leaks past this module.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import pynvml  # type: ignore[import-untyped]

from llmgw.agent.discovery.gpu_class import gpu_class
from llmgw.agent.discovery.gpu_probe import GpuProbe
from llmgw.wire.messages import GPU, MigInstance

# No libnvidia-ml, or no kernel driver behind it: this host has no NVIDIA cards to offer, which is not an error.
_ABSENT = {pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_DRIVER_NOT_LOADED}
# What NVML answers for a link number the card does not have, or a query the card does not support.
_NO_SUCH_THING = {pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_INVALID_ARGUMENT}


class NvmlApi(Protocol):
    """The part of pynvml used here; the pynvml module itself satisfies it, tests pass a fake."""

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> Any: ...
    def nvmlDeviceGetCount(self) -> Any: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetName(self, handle: Any) -> Any: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> Any: ...
    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Any) -> Any: ...
    def nvmlDeviceGetRemappedRows(self, handle: Any) -> Any: ...
    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> Any: ...
    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: Any, link: int) -> Any: ...
    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: int) -> Any: ...
    def nvmlSystemGetCudaDriverVersion(self) -> Any: ...
    def nvmlDeviceGetMigMode(self, handle: Any) -> Any: ...
    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> Any: ...
    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> Any: ...
    def nvmlDeviceGetGpuInstanceId(self, handle: Any) -> Any: ...
    def nvmlDeviceGetComputeInstanceId(self, handle: Any) -> Any: ...
    def nvmlDeviceGetAttributes(self, handle: Any) -> Any: ...


class _NvmlError(Exception):
    def __init__(self, code: int | None, words: str) -> None:
        super().__init__(words)
        self.code = code
        self.words = words


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except pynvml.NVMLError as e:
        raise _NvmlError(getattr(e, "value", None), str(e)) from None


def _text(value: Any) -> str:
    # older pynvml returns bytes, newer returns str
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def normalize_pci_bus_id(bus_id: str) -> str:
    """ "00000000:18:00.0" and "0000:18:00.0" are the same device: NVML writes the domain in 8 or 4 digits."""
    text = bus_id.strip().lower()
    domain, sep, rest = text.rpartition(":")
    if not sep:
        return text
    head, sep2, bus = domain.rpartition(":")
    if not sep2:
        return text  # no domain at all: "18:00.0"
    try:
        return f"{int(head, 16):04x}:{bus}:{rest}"
    except ValueError:
        return text


@dataclass
class _Card:
    index: int
    handle: Any = None
    name: str = ""
    memory_mib: int = 0
    uuid: str = ""
    bus_id: str = ""
    faults: list[str] = field(default_factory=list)
    mig: list[MigInstance] | None = None


def _health_faults(nvml: NvmlApi, handle: Any) -> list[str]:
    """Memory errors that make a card unfit until reset or service, in NVIDIA's terms."""
    faults = []
    try:
        if _call(nvml.nvmlDeviceGetRetiredPagesPendingStatus, handle) == pynvml.NVML_FEATURE_ENABLED:
            faults.append("retired pages pending: reset the GPU to retire them")
    except _NvmlError as f:
        if f.code == pynvml.NVML_ERROR_GPU_IS_LOST:
            faults.append(f"NVML: {f.words}")
    try:
        # Ampere and newer remap rows instead of retiring pages
        _corrected, _uncorrected, pending, failure = _call(nvml.nvmlDeviceGetRemappedRows, handle)
        if failure:
            faults.append("row remapping failure: the card needs service")
        elif pending:
            faults.append("row remapping pending: reset the GPU to apply it")
    except _NvmlError as f:
        if f.code == pynvml.NVML_ERROR_GPU_IS_LOST:
            faults.append(f"NVML: {f.words}")
    return faults


def _probe_card(nvml: NvmlApi, index: int) -> _Card:
    card = _Card(index=index)
    try:
        card.handle = _call(nvml.nvmlDeviceGetHandleByIndex, index)
        card.name = _text(_call(nvml.nvmlDeviceGetName, card.handle))
        card.memory_mib = int(_call(nvml.nvmlDeviceGetMemoryInfo, card.handle).total) // (1024 * 1024)
    except _NvmlError as f:
        # The driver counts the card but cannot describe it: it is there and unusable.
        card.faults.append(f"NVML: {f.words}")
        return card
    try:
        card.uuid = _text(_call(nvml.nvmlDeviceGetUUID, card.handle))
        card.bus_id = normalize_pci_bus_id(_text(_call(nvml.nvmlDeviceGetPciInfo, card.handle).busId))
    except _NvmlError:
        pass  # identity extras: without a bus id the card only loses its NVLink peers
    card.faults.extend(_health_faults(nvml, card.handle))
    card.mig = _mig_instances(nvml, card.handle)
    return card


_MIG_PROFILE = re.compile(r"\bMIG\s+(\S+)")
_MAX_MIG = 64


def _mig_instance(nvml: NvmlApi, handle: Any) -> MigInstance:
    """One instance; a detail NVML will not give is left at zero rather than losing the instance."""
    found: dict[str, Any] = {}
    for key, fn in (
        ("name", nvml.nvmlDeviceGetName),
        ("memory", nvml.nvmlDeviceGetMemoryInfo),
        ("gi", nvml.nvmlDeviceGetGpuInstanceId),
        ("ci", nvml.nvmlDeviceGetComputeInstanceId),
        ("attrs", nvml.nvmlDeviceGetAttributes),
    ):
        with contextlib.suppress(_NvmlError):
            found[key] = _call(fn, handle)
    profile = _MIG_PROFILE.search(_text(found.get("name", "")))  # "NVIDIA A100-SXM4-40GB MIG 3g.20gb"
    memory = found.get("memory")
    return MigInstance(
        gpu_instance=int(found.get("gi", 0)),
        compute_instance=int(found.get("ci", 0)),
        memory_mib=int(memory.total) // (1024 * 1024) if memory is not None else 0,
        multiprocessors=int(getattr(found.get("attrs"), "multiprocessorCount", 0)),
        profile=profile.group(1)[:128] if profile else "",
    )


def _mig_instances(nvml: NvmlApi, handle: Any) -> list[MigInstance] | None:
    """The card's MIG instances when MIG mode is on; None when it is off or the card has no MIG."""
    try:
        current = _call(nvml.nvmlDeviceGetMigMode, handle)[0]
    except _NvmlError:
        return None
    if current != pynvml.NVML_DEVICE_MIG_ENABLE:
        return None
    instances: list[MigInstance] = []
    try:
        slots = int(_call(nvml.nvmlDeviceGetMaxMigDeviceCount, handle))
    except _NvmlError:
        return instances  # MIG is on, its instances unknown: still not a whole card
    for slot in range(min(slots, _MAX_MIG)):
        try:
            mig_handle = _call(nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, slot)
        except _NvmlError:
            continue  # an empty slot answers NOT_FOUND
        instances.append(_mig_instance(nvml, mig_handle))
    return instances


def _cuda_version(nvml: NvmlApi) -> str:
    """The newest CUDA the driver supports: NVML's 12020 is "12.2"."""
    try:
        version = int(_call(nvml.nvmlSystemGetCudaDriverVersion))
    except (_NvmlError, TypeError, ValueError):
        return ""
    return f"{version // 1000}.{version % 1000 // 10}" if version > 0 else ""


@dataclass
class _Links:
    gpu_bus_ids: set[str] = field(default_factory=set)
    to_switch: bool = False


def _probe_links(nvml: NvmlApi, handle: Any) -> _Links | None:
    """The card's active NVLinks, or None when NVML could not say (topology unknown)."""
    links = _Links()
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
        try:
            if _call(nvml.nvmlDeviceGetNvLinkState, handle, link) != pynvml.NVML_FEATURE_ENABLED:
                continue
        except _NvmlError as f:
            if f.code in _NO_SUCH_THING:
                continue
            return None
        try:
            kind = _call(nvml.nvmlDeviceGetNvLinkRemoteDeviceType, handle, link)
        except _NvmlError:
            kind = None  # older drivers: judge by the bus id alone
        if kind == pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH:
            links.to_switch = True
            continue
        if kind not in (None, pynvml.NVML_NVLINK_DEVICE_TYPE_GPU):
            continue  # an IBM NPU (POWER9 CPU): not a peer for tensor groups
        try:
            remote = _call(nvml.nvmlDeviceGetNvLinkRemotePciInfo, handle, link)
        except _NvmlError:
            return None
        links.gpu_bus_ids.add(normalize_pci_bus_id(_text(remote.busId)))
    return links


def _peers(nvml: NvmlApi, cards: list[_Card]) -> dict[int, list[int] | None]:
    by_bus = {c.bus_id: c.index for c in cards if c.bus_id}
    links = {c.index: _probe_links(nvml, c.handle) if c.handle is not None and c.bus_id else None for c in cards}
    # Behind NVSwitch (HGX), a card's links end at a switch, not at another card's bus id; every card on the
    # switches reaches every other at full bandwidth.
    on_switch = {i for i, lk in links.items() if lk is not None and lk.to_switch}
    peers: dict[int, list[int] | None] = {}
    for c in cards:
        lk = links[c.index]
        if lk is None:
            peers[c.index] = None
            continue
        direct = {by_bus[b] for b in lk.gpu_bus_ids if b in by_bus}
        switched = on_switch if c.index in on_switch else set()
        peers[c.index] = sorted((direct | switched) - {c.index})
    return peers


def probe_nvml(nvml: NvmlApi) -> GpuProbe:
    """source "nvml" with the cards; source "none" when NVML is absent (no problems) or unusable (problems)."""
    try:
        _call(nvml.nvmlInit)
    except _NvmlError as f:
        if f.code in _ABSENT:
            return GpuProbe(source="none")
        return GpuProbe(source="none", problems=[f"NVML: {f.words}"])
    try:
        try:
            driver = _text(_call(nvml.nvmlSystemGetDriverVersion))
        except _NvmlError:
            driver = ""
        cuda = _cuda_version(nvml)
        try:
            count = int(_call(nvml.nvmlDeviceGetCount))
        except _NvmlError as f:
            return GpuProbe(source="none", driver=driver, problems=[f"NVML: cannot count the GPUs: {f.words}"])
        cards = [_probe_card(nvml, i) for i in range(count)]
        peers = _peers(nvml, cards)
    finally:
        with contextlib.suppress(_NvmlError):  # nothing to undo: the next probe initialises again
            _call(nvml.nvmlShutdown)
    gpus = [
        GPU(
            index=c.index,
            uuid=c.uuid,
            name=c.name,
            gpu_class=gpu_class(c.name, c.memory_mib),
            memory_mib=c.memory_mib,
            faulty=bool(c.faults),
            fault="; ".join(c.faults),
            nvlink_peers=peers[c.index],
            mig=c.mig,
        )
        for c in cards
    ]
    return GpuProbe(source="nvml", driver=driver, cuda=cuda, gpus=gpus)
