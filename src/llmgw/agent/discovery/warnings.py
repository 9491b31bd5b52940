"""What an operator should know about a node's hardware, in words, computed from the Hardware report alone."""

from __future__ import annotations

from llmgw.wire.messages import Hardware, Problem

NO_AVX2 = "no AVX2: inference will be several times slower (a VM CPU type such as kvm64 hides it)"
NVLINK_UNKNOWN = "NVLink topology unknown: tensor groups use the lowest free indices"


def hardware_warnings(hw: Hardware) -> list[Problem]:
    warnings: list[Problem] = []
    if hw.lacks_avx2:
        warnings.append(Problem(code="NoAVX2", message=NO_AVX2, subject="cpu"))
    for gpu in hw.gpus:
        if gpu.faulty:
            words = f"GPU {gpu.index} ({gpu.gpu_class}) is faulty: {gpu.fault or 'no reason given'}"
            warnings.append(Problem(code="GPUFaulty", message=words, subject=f"gpu{gpu.index}"))
        elif gpu.mig is not None:
            made = f"{len(gpu.mig)} instances" if gpu.mig else "no instances made"
            words = f"GPU {gpu.index} ({gpu.gpu_class}) is in MIG mode with {made}: not offered whole"
            warnings.append(Problem(code="GPUInMIGMode", message=words, subject=f"gpu{gpu.index}"))
    # the links of a card that is not offered whole do not matter: it will not be placed on
    if any(g.nvlink_peers is None for g in hw.gpus if g.offered_whole):
        warnings.append(Problem(code="NVLinkUnknown", message=NVLINK_UNKNOWN, subject="gpus"))
    if hw.gpus and not hw.nvidia_driver:
        warnings.append(Problem(code="GPUDriverUnreadable", subject="gpus", message=(
            f"{len(hw.gpus)} GPU(s) found ({hw.gpu_source}) but no NVIDIA driver version could be read: every engine "
            "llmgw installs takes its CPU build here, and no model that asks for GPUs is placed on those builds")))
    warnings.extend(Problem(code="GPUDiscoveryProblem", message=f"GPU discovery: {p}", subject="gpus")
                    for p in hw.gpu_problems)
    return warnings
