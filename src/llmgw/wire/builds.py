"""Which build of an engine a node takes, and why it passed over each better one. Pure: the node's facts in, the
choice and its reasons out.

A node with an NVIDIA driver prefers the newest CUDA build its driver runs, then an older CUDA, then Vulkan, and
the CPU build only as a stated fallback. Each build passed over carries a reason code and both sides' versions.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmgw.core.reasons import Reason
from llmgw.wire.engines import EngineSource, EngineVariant, machine_arch

# The oldest NVIDIA driver each CUDA major version runs on (NVIDIA's minor-version compatibility: a build made with
# 12.8 runs on any 12.x driver): the node reads its driver's version from nvidia-smi or NVML.
CUDA_MIN_DRIVER = {11: 450, 12: 525, 13: 580}
# The distribution a glibc first came with, so the words say what an operator would upgrade to
GLIBC_RELEASES = {"2.35": "Ubuntu 22.04", "2.36": "Debian 12", "2.39": "Ubuntu 24.04", "2.41": "Debian 13",
                  "2.34": "RHEL 9", "2.28": "RHEL 8", "2.31": "Ubuntu 20.04"}


@dataclass(frozen=True)
class NodeFacts:
    """What a node knows of itself that decides which build runs on it ("" where it could not read it)."""

    arch: str
    nvidia_driver: str = ""  # "550.54.15"
    nvidia_cuda: str = ""  # the newest CUDA the driver supports, "12.4"
    glibc: str = ""  # "2.36"; "" for another C library or none read
    # GPUs found (NVML, nvidia-smi or the inventory) while no driver version could be read: no GPU build can be
    # chosen for them, and the CPU build taken says so rather than passing for a node without GPUs
    gpus_without_driver: int = 0


@dataclass(frozen=True)
class PassedOver:
    variant: str
    reason: Reason
    message: str


@dataclass(frozen=True)
class Choice:
    variant: EngineVariant | None
    passed_over: tuple[PassedOver, ...] = ()
    note: str = ""  # why this build (a fallback), or why none fits


def _numbers(version: str) -> tuple[int, ...]:
    out = []
    for part in version.split("."):
        digits = "".join(c for c in part[:6] if c.isdigit())
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


def _cuda_major(v: EngineVariant) -> int | None:
    """The CUDA major version a build was made with; None when it does not say (a `cudaNN-` build always does: the
    wire model holds its `cuda` to its name)."""
    return _numbers(v.cuda)[0] if v.cuda else None


def _glibc_words(version: str) -> str:
    where = GLIBC_RELEASES.get(version)
    return f"glibc {version}" + (f" ({where})" if where else "")


def _unfit(v: EngineVariant, node: NodeFacts) -> PassedOver | None:
    """Why this build cannot run on this node, from what both say of themselves; None when nothing says it cannot."""
    if v.accelerator == "cuda":
        major = _cuda_major(v)
        built = f"CUDA {v.cuda}" if v.cuda else "CUDA"
        need = CUDA_MIN_DRIVER.get(major or 0)
        has = f"{node.nvidia_driver}" + (f" (CUDA {node.nvidia_cuda})" if node.nvidia_cuda else "")
        driver = _numbers(node.nvidia_driver)
        if need is not None and driver and driver[0] < need:
            return PassedOver(v.variant, Reason.DriverTooOld,
                              f"{v.variant} is built with {built} and needs an NVIDIA driver of {need} or newer; "
                              f"this node's driver is {has}")
        supported = _numbers(node.nvidia_cuda)
        if major is not None and supported and supported[0] < major:
            return PassedOver(v.variant, Reason.DriverTooOld,
                              f"{v.variant} is built with {built}; this node's driver {has} runs CUDA up to "
                              f"{node.nvidia_cuda}")
    if v.glibc and node.glibc and _numbers(node.glibc) < _numbers(v.glibc):
        return PassedOver(v.variant, Reason.LibcTooOld,
                          f"{v.variant} needs {_glibc_words(v.glibc)} or newer (its binaries will not start: "
                          f"GLIBC_{v.glibc} not found); this node has {_glibc_words(node.glibc)}")
    return None


def _preference(v: EngineVariant) -> tuple[int, tuple[int, ...]]:
    """Higher first: CUDA (newest first), then Vulkan, then CPU."""
    rank = {"cuda": 2, "vulkan": 1}.get(v.accelerator, 0)
    return rank, _numbers(v.cuda) if v.cuda else (0,)


def choose_build(source: EngineSource, node: NodeFacts, refused: dict[str, PassedOver] | None = None) -> Choice:
    """The build for this node. `refused`: builds this node already tried and saw fail for a reason of the node
    itself (a library ldd could not find): they are passed over with those words."""
    family = machine_arch(node.arch)
    gpu = bool(node.nvidia_driver)
    mine = sorted((v for v in source.variants if v.arch == family and (gpu or v.accelerator == "cpu")),
                  key=_preference, reverse=True)
    passed: list[PassedOver] = []
    if gpu and not any(v.accelerator != "cpu" for v in mine):
        elsewhere = sorted(v.variant for v in source.variants if v.accelerator != "cpu")
        offered = f" (its GPU builds: {', '.join(elsewhere)})" if elsewhere else ""
        passed.append(PassedOver(f"gpu-{family}", Reason.NoBuildForProcessor,
                                 f"{source.name} {source.version} has no GPU build for {family}{offered}"))
    for v in mine:
        why = (refused or {}).get(v.variant) or _unfit(v, node)
        if why is None:
            return Choice(v, tuple(passed), _fallback_note(source, v, gpu, node))
        passed.append(why)
    offered = ", ".join(sorted(v.variant for v in source.variants)) or "none"
    if not passed:
        return Choice(None, (), f"{source.name} {source.version} has no build for {family} (offered: {offered})"
                                + _unread_driver_words(node))
    return Choice(None, tuple(passed), f"no build of {source.name} {source.version} runs on this node: "
                                       + "; ".join(p.message for p in passed))


def _unread_driver_words(node: NodeFacts) -> str:
    if node.nvidia_driver or not node.gpus_without_driver:
        return ""
    return (f"; {node.gpus_without_driver} GPU(s) were found but no NVIDIA driver version could be read, so no GPU "
            "build could be chosen")


def _fallback_note(source: EngineSource, v: EngineVariant, gpu: bool, node: NodeFacts) -> str:
    if v.accelerator == "cpu" and not gpu and node.gpus_without_driver:
        return (f"{node.gpus_without_driver} GPU(s) were found but no NVIDIA driver version could be read: the CPU "
                f"build {v.variant} of {source.name} {source.version} is used (a fallback)")
    if not gpu or v.accelerator != "cpu":
        return ""
    return (f"an NVIDIA driver is loaded but no GPU build of {source.name} {source.version} fits this node: "
            f"the CPU build {v.variant} is used (a fallback)")


__all__ = ["CUDA_MIN_DRIVER", "Choice", "NodeFacts", "PassedOver", "choose_build"]
