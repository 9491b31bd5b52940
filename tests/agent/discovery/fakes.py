"""Test doubles for the GPU sources: a pynvml stand-in and nvidia-smi runners."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml  # type: ignore[import-untyped]

from llmgw.agent.discovery import CommandResult

GiB_MIB = 1024


def nvml_error(code: int) -> Exception:
    # pynvml maps the code to its subclass (NVMLError_LibraryNotFound, ...), as the real library does
    return pynvml.NVMLError(code)  # type: ignore[no-any-return]


@dataclass
class FakeMig:
    """One MIG instance, as NVML describes it through its own device handle."""

    name: str = "NVIDIA A100-SXM4-80GB MIG 3g.40gb"
    memory_mib: int = 40192
    gpu_instance: int = 1
    compute_instance: int = 0
    multiprocessors: int = 42


@dataclass
class FakeCard:
    name: str | bytes = "NVIDIA H100 80GB HBM3"
    memory_mib: int = 81559
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    bus_id: str = "00000000:18:00.0"
    retired_pending: int = 0
    remapped: tuple[int, int, int, int] = (0, 0, 0, 0)
    # (remote device type, remote bus id) per active link
    links: list[tuple[int, str]] = field(default_factory=list)
    # what NVML answers for a link number past the card's links; NOT_SUPPORTED for a card without NVLink
    past_links: int = pynvml.NVML_ERROR_INVALID_ARGUMENT
    # method name -> NVML error code it raises for this card
    fail: dict[str, int] = field(default_factory=dict)
    # MIG mode on with these instances (None in a slot: an empty slot); None = a card without MIG
    mig: list[FakeMig | None] | None = None


class FakeNvml:
    """Answers like pynvml for the cards given; records every call."""

    def __init__(
        self,
        cards: Sequence[FakeCard] = (),
        *,
        init_error: int | None = None,
        driver: str = "550.54.15",
        cuda: int = 12040,
    ) -> None:
        self.cards = list(cards)
        self.init_error = init_error
        self.driver = driver
        self.cuda = cuda
        self.calls: list[str] = []

    def _card(self, what: str, handle: Any) -> FakeCard:
        self.calls.append(what)
        card: FakeCard = self.cards[handle]
        if what in card.fail:
            raise nvml_error(card.fail[what])
        return card

    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        if self.init_error is not None:
            raise nvml_error(self.init_error)

    def nvmlShutdown(self) -> None:
        self.calls.append("nvmlShutdown")

    def nvmlSystemGetDriverVersion(self) -> str:
        self.calls.append("nvmlSystemGetDriverVersion")
        return self.driver

    def nvmlDeviceGetCount(self) -> int:
        self.calls.append("nvmlDeviceGetCount")
        return len(self.cards)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self._card("nvmlDeviceGetHandleByIndex", index)
        return index

    def _mig(self, what: str, handle: tuple[int, int]) -> FakeMig:
        mig = self._card(what, handle[0]).mig
        instance = mig[handle[1]] if mig is not None and handle[1] < len(mig) else None
        assert instance is not None, f"{what} on MIG handle {handle} that NVML never gave"
        return instance

    def nvmlDeviceGetName(self, handle: int | tuple[int, int]) -> str | bytes:
        if isinstance(handle, tuple):
            return self._mig("nvmlDeviceGetName", handle).name
        return self._card("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetMemoryInfo(self, handle: int | tuple[int, int]) -> SimpleNamespace:
        if isinstance(handle, tuple):
            return SimpleNamespace(total=self._mig("nvmlDeviceGetMemoryInfo", handle).memory_mib * 1024 * 1024)
        return SimpleNamespace(total=self._card("nvmlDeviceGetMemoryInfo", handle).memory_mib * 1024 * 1024)

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self.calls.append("nvmlSystemGetCudaDriverVersion")
        return self.cuda

    def nvmlDeviceGetMigMode(self, handle: int) -> list[int]:
        card = self._card("nvmlDeviceGetMigMode", handle)
        if card.mig is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_ENABLE]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: int) -> int:
        self._card("nvmlDeviceGetMaxMigDeviceCount", handle)
        return 7  # an A100's or H100's most

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: int, index: int) -> tuple[int, int]:
        mig = self._card("nvmlDeviceGetMigDeviceHandleByIndex", handle).mig or []
        if index >= len(mig) or mig[index] is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)
        return (handle, index)

    def nvmlDeviceGetGpuInstanceId(self, handle: tuple[int, int]) -> int:
        return self._mig("nvmlDeviceGetGpuInstanceId", handle).gpu_instance

    def nvmlDeviceGetComputeInstanceId(self, handle: tuple[int, int]) -> int:
        return self._mig("nvmlDeviceGetComputeInstanceId", handle).compute_instance

    def nvmlDeviceGetAttributes(self, handle: tuple[int, int]) -> SimpleNamespace:
        return SimpleNamespace(multiprocessorCount=self._mig("nvmlDeviceGetAttributes", handle).multiprocessors)

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return self._card("nvmlDeviceGetUUID", handle).uuid

    def nvmlDeviceGetPciInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(busId=self._card("nvmlDeviceGetPciInfo", handle).bus_id)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: int) -> int:
        return self._card("nvmlDeviceGetRetiredPagesPendingStatus", handle).retired_pending

    def nvmlDeviceGetRemappedRows(self, handle: int) -> tuple[int, int, int, int]:
        return self._card("nvmlDeviceGetRemappedRows", handle).remapped

    def _link(self, what: str, handle: int, link: int) -> tuple[int, str]:
        card = self._card(what, handle)
        if link >= len(card.links):
            raise nvml_error(card.past_links)
        return card.links[link]

    def nvmlDeviceGetNvLinkState(self, handle: int, link: int) -> int:
        self._link("nvmlDeviceGetNvLinkState", handle, link)
        return int(pynvml.NVML_FEATURE_ENABLED)

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: int, link: int) -> int:
        return self._link("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)[0]

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: int, link: int) -> SimpleNamespace:
        # real pynvml hands back the C struct's bytes
        return SimpleNamespace(busId=self._link("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)[1].encode())


NVML_ABSENT = FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)


class FakeRunner:
    """Answers one program run; None stands for "not installed"."""

    def __init__(self, result: CommandResult | None) -> None:
        self.result = result
        self.argvs: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> CommandResult | None:
        self.argvs.append(list(argv))
        return self.result


def smi_not_installed() -> FakeRunner:
    return FakeRunner(None)


class Forbidden:
    """A source that must not be consulted: any use fails the test."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"{name} used, but this source should not have been consulted")

    def __call__(self, *args: Any) -> Any:
        raise AssertionError("called, but this source should not have been consulted")


def smi_xml(*cards: tuple[str, int, str], driver: str = "550.54.15", cuda: str = "12.4") -> str:
    """A short `nvidia-smi -q -x` answer: (product name, memory MiB, uuid) per card, in nvidia-smi's layout.
    The recorded outputs of real machines are in tests/fixtures/nvidia-smi/."""
    gpus = "".join(
        f'\t<gpu id="00000000:{0x18 + i:02X}:00.0">\n\t\t<product_name>{name}</product_name>\n'
        f"\t\t<mig_mode>\n\t\t\t<current_mig>N/A</current_mig>\n\t\t</mig_mode>\n\t\t<uuid>{uuid}</uuid>\n"
        f"\t\t<fb_memory_usage>\n\t\t\t<total>{memory} MiB</total>\n\t\t</fb_memory_usage>\n\t</gpu>\n"
        for i, (name, memory, uuid) in enumerate(cards)
    )
    return (
        '<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n<nvidia_smi_log>\n'
        f"\t<driver_version>{driver}</driver_version>\n\t<cuda_version>{cuda}</cuda_version>\n"
        f"\t<attached_gpus>{len(cards)}</attached_gpus>\n{gpus}</nvidia_smi_log>\n"
    )
