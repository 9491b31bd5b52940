"""What an operator should know about a node's hardware, in words, computed from the Hardware report alone."""

from __future__ import annotations

from llmgw.wire.messages import Hardware

# Names the kernel and Python use for x86: AVX2 only means something there.
X86_ARCHES = {"x86_64", "amd64", "i386", "i686"}

NO_AVX2 = "no AVX2: inference will be several times slower (a VM CPU type such as kvm64 hides it)"
NVLINK_UNKNOWN = "NVLink topology unknown: tensor groups use the lowest free indices"


def hardware_warnings(hw: Hardware) -> list[str]:
    warnings: list[str] = []
    # cores == 0 means cpuinfo was not read: unknown is not "lacks AVX2"
    if hw.arch.lower() in X86_ARCHES and hw.cpu.cores > 0 and not hw.cpu.avx2:
        warnings.append(NO_AVX2)
    for gpu in hw.gpus:
        if gpu.faulty:
            warnings.append(f"GPU {gpu.index} ({gpu.gpu_class}) is faulty: {gpu.fault or 'no reason given'}")
    # a faulty card's links do not matter: it will not be placed on
    if any(g.nvlink_peers is None for g in hw.gpus if not g.faulty):
        warnings.append(NVLINK_UNKNOWN)
    warnings.extend(f"GPU discovery: {p}" for p in hw.gpu_problems)
    return warnings
