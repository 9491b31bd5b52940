from __future__ import annotations

from llmgw.agent.discovery import hardware_warnings
from llmgw.agent.discovery.warnings import NO_AVX2, NVLINK_UNKNOWN
from llmgw.wire.messages import CPU, GPU, Hardware, MigInstance


def words(hw: Hardware) -> list[str]:
    return [p.message for p in hardware_warnings(hw)]


def test_each_warning_carries_its_code() -> None:
    hw = Hardware(nvidia_driver=DRIVER, arch="x86_64", cpu=CPU(cores=4), gpus=[gpu(0, None)])
    assert [p.code for p in hardware_warnings(hw)] == ["NoAVX2", "NVLinkUnknown"]


def gpu(index: int, peers: list[int] | None, fault: str = "") -> GPU:
    return GPU(
        index=index,
        name="NVIDIA H100 80GB HBM3",
        gpu_class="H100-80G",
        memory_mib=81559,
        faulty=bool(fault),
        fault=fault,
        nvlink_peers=peers,
    )


AVX2_CPU = CPU(model="x", cores=8, avx2=True)
DRIVER = "580.95.05"  # a node with cards has a driver; one without is a warning of its own (below)


def test_healthy_node_has_no_warnings() -> None:
    hw = Hardware(nvidia_driver=DRIVER, arch="x86_64", cpu=AVX2_CPU, gpus=[gpu(0, [1]), gpu(1, [0])])
    assert words(hw) == []


def test_x86_without_avx2() -> None:
    assert words(Hardware(arch="x86_64", cpu=CPU(cores=4))) == [NO_AVX2]
    assert NO_AVX2.startswith("no AVX2: ") and "kvm64" in NO_AVX2


def test_arm_and_unknown_cpu_are_not_blamed_for_avx2() -> None:
    assert words(Hardware(arch="aarch64", cpu=CPU(cores=72))) == []
    assert words(Hardware(arch="x86_64", cpu=CPU())) == []


def test_faulty_card_with_its_words() -> None:
    hw = Hardware(nvidia_driver=DRIVER, arch="x86_64", cpu=AVX2_CPU,
                  gpus=[gpu(0, [1]), gpu(1, [0], "Xid 79: GPU has fallen off the bus")])
    assert words(hw) == ["GPU 1 (H100-80G) is faulty: Xid 79: GPU has fallen off the bus"]


def test_unknown_topology_once() -> None:
    hw = Hardware(nvidia_driver=DRIVER, arch="x86_64", cpu=AVX2_CPU, gpus=[gpu(0, None), gpu(1, None)])
    assert words(hw) == [NVLINK_UNKNOWN]


def test_known_empty_topology_is_not_unknown() -> None:
    assert words(Hardware(nvidia_driver=DRIVER, arch="x86_64", cpu=AVX2_CPU, gpus=[gpu(0, [])])) == []


def test_gpu_discovery_problems_reach_the_warnings() -> None:
    from llmgw.wire.messages import Hardware

    hw = Hardware(gpu_problems=["NVML: Driver/library version mismatch"])
    assert "GPU discovery: NVML: Driver/library version mismatch" in words(hw)


def test_a_card_in_mig_mode_is_named_and_its_links_do_not_matter() -> None:
    slices = [MigInstance(gpu_instance=i, compute_instance=0, memory_mib=19968) for i in (3, 4)]
    cut = gpu(0, None).model_copy(update={"mig": slices})
    unmade = gpu(1, None).model_copy(update={"mig": []})
    problems = hardware_warnings(Hardware(nvidia_driver=DRIVER, arch="x86_64", cpu=AVX2_CPU, gpus=[cut, unmade]))
    assert [(p.code, p.subject, p.message) for p in problems] == [
        ("GPUInMIGMode", "gpu0", "GPU 0 (H100-80G) is in MIG mode with 2 instances: not offered whole"),
        ("GPUInMIGMode", "gpu1", "GPU 1 (H100-80G) is in MIG mode with no instances made: not offered whole"),
    ]


def test_cards_without_a_readable_driver_are_said_never_a_silent_cpu_build() -> None:
    hw = Hardware(arch="x86_64", cpu=AVX2_CPU, gpu_source="nvml", gpus=[gpu(0, [1]), gpu(1, [0])])
    assert [(p.code, p.subject) for p in hardware_warnings(hw)] == [("GPUDriverUnreadable", "gpus")]
    assert words(hw) == ["2 GPU(s) found (nvml) but no NVIDIA driver version could be read: every engine llmgw "
                         "installs takes its CPU build here, and no model that asks for GPUs is placed on those builds"]
    assert words(hw.model_copy(update={"nvidia_driver": DRIVER})) == []
