"""Each fixture host is discovered as what it is."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from llmgw.agent.discovery import CommandResult, DeclaredFabric, check_fabrics, discover, hardware_warnings
from llmgw.agent.discovery.warnings import NO_AVX2, NVLINK_UNKNOWN
from llmgw.wire.messages import Fabric, Hardware

from .fakes import NVML_ABSENT, FakeRunner, Forbidden, smi_not_installed, smi_xml
from .hosts import host, inventory

GiB = 2**30
IB_FABRIC = [DeclaredFabric("ib-a", ["mlx5_0", "mlx5_1"])]


def fabric_words(declared: Any, adapters: Any) -> tuple[list[Fabric], list[str]]:
    fabrics, problems = check_fabrics(declared, adapters)
    return fabrics, [p.message for p in problems]


def gpu_node(name: str, tmp_path: Path) -> Hardware:
    # an inventory is configured: neither NVML nor nvidia-smi may be consulted
    return discover(
        host(name),
        inventory=inventory(name),
        weights_dir=tmp_path,
        default_arch="aarch64",
        run=Forbidden(),
        nvml=Forbidden(),
    )


def cpu_node(name: str) -> Hardware:
    return discover(
        host(name), inventory=None, weights_dir=None, default_arch="x86_64", run=smi_not_installed(), nvml=NVML_ABSENT
    )


def test_vm_noavx2() -> None:
    hw = cpu_node("vm-noavx2")
    assert (hw.arch, hw.os) == ("x86_64", "Debian GNU/Linux 12 (bookworm)")
    assert hw.cpu.cores == 4 and not hw.cpu.avx2
    assert round(hw.mem_total_bytes / GiB) == 8
    assert (hw.gpu_source, hw.gpus, hw.ib_adapters, hw.disk) == ("none", [], [], None)
    assert [p.message for p in hardware_warnings(hw)] == [NO_AVX2]


def test_cpu_avx2() -> None:
    hw = cpu_node("cpu-avx2")
    assert hw.cpu.avx2 and hw.cpu.avx512f and not hw.cpu.amx
    assert round(hw.mem_total_bytes / GiB) == 63  # 64 GiB of DIMMs, less what firmware and kernel keep
    assert hw.mem_available_bytes < hw.mem_total_bytes
    assert (hw.gpu_source, hw.gpus, hw.ib_adapters) == ("none", [], [])
    assert [p.message for p in hardware_warnings(hw)] == []


def test_h100x8_ib2(tmp_path: Path) -> None:
    hw = gpu_node("h100x8-ib2", tmp_path)
    assert hw.arch == "x86_64"  # the kernel's word beats the caller's default
    assert (hw.gpu_source, hw.nvidia_driver) == ("inventory", "550.54.15")
    assert [g.gpu_class for g in hw.gpus] == ["H100-80G"] * 8
    assert all(len(g.nvlink_peers or []) == 7 and not g.faulty for g in hw.gpus)
    assert round(hw.mem_total_bytes / 2**40) == 2
    assert hw.cpu.amx
    assert hw.disk is not None and hw.disk.path == str(tmp_path.resolve())
    assert [(a.name, [(p.port, p.state, p.rate_gbps) for p in a.ports]) for a in hw.ib_adapters] == [
        ("mlx5_0", [(1, "ACTIVE", 400.0)]),
        ("mlx5_1", [(1, "ACTIVE", 400.0)]),
    ]
    fabrics, problems = fabric_words(IB_FABRIC, hw.ib_adapters)
    assert [(f.name, f.adapters, f.rate_gbps) for f in fabrics] == [("ib-a", ["mlx5_0", "mlx5_1"], 400.0)]
    assert problems == []
    assert [p.message for p in hardware_warnings(hw)] == []


def test_h100x8_ib_init(tmp_path: Path) -> None:
    hw = gpu_node("h100x8-ib-init", tmp_path)
    assert [g.index for g in hw.gpus if g.faulty] == [3]
    assert [a.ports[0].state for a in hw.ib_adapters] == ["ACTIVE", "INIT"]
    fabrics, problems = fabric_words(IB_FABRIC, hw.ib_adapters)
    assert [(f.name, f.adapters, f.rate_gbps) for f in fabrics] == [("ib-a", ["mlx5_0"], 400.0)]
    assert problems == ["fabric ib-a: adapter mlx5_1 has no ACTIVE port (port 1: INIT)"]
    xid = "GPU 3 (H100-80G) is faulty: Xid 79: GPU has fallen off the bus"
    assert [(p.code, p.message) for p in hardware_warnings(hw)] == [("GPUFaulty", xid)]


def test_l40sx4_pcie_pairs(tmp_path: Path) -> None:
    hw = gpu_node("l40sx4-pcie-pairs", tmp_path)
    assert [g.gpu_class for g in hw.gpus] == ["L40S-45G"] * 4
    assert [g.nvlink_peers for g in hw.gpus] == [[1], [0], [3], [2]]
    assert [(a.name, a.ports[0].state, a.ports[0].rate_gbps) for a in hw.ib_adapters] == [("mlx5_0", "ACTIVE", 200.0)]
    assert not hw.cpu.amx and hw.cpu.avx512f


def test_nvidia_smi_node_warns_topology_unknown_and_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    smi = FakeRunner(CommandResult(0, smi_xml(("NVIDIA L40S", 46068, "GPU-1"), ("NVIDIA L40S", 46068, "GPU-2"))))
    with caplog.at_level(logging.WARNING):
        hw = discover(
            host("cpu-avx2"), inventory=None, weights_dir=None, default_arch="x86_64", run=smi, nvml=NVML_ABSENT
        )
    assert hw.gpu_source == "nvidia-smi" and len(hw.gpus) == 2
    assert [p.message for p in hardware_warnings(hw)] == [NVLINK_UNKNOWN]
    assert caplog.records == []


def test_gpu_problems_are_logged_not_lost(caplog: pytest.LogCaptureFixture) -> None:
    smi = FakeRunner(
        CommandResult(9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")
    )
    with caplog.at_level(logging.WARNING):
        hw = discover(
            host("cpu-avx2"), inventory=None, weights_dir=None, default_arch="x86_64", run=smi, nvml=NVML_ABSENT
        )
    assert hw.gpu_source == "none"
    assert any("couldn't communicate with the NVIDIA driver" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("name", ["vm-noavx2", "cpu-avx2", "h100x8-ib2", "l40sx4-pcie-pairs", "h100x8-ib-init"])
def test_every_fixture_has_the_basics(name: str) -> None:
    root = host(name)
    for rel in ("proc/meminfo", "proc/cpuinfo", "etc/os-release"):
        assert root.read_text(rel), f"{name}: {rel} missing or empty"
    hw = discover(
        root, inventory=None, weights_dir=None, default_arch="x86_64", run=smi_not_installed(), nvml=NVML_ABSENT
    )
    assert hw.cpu.cores >= 2 and hw.cpu.model
    assert hw.mem_total_bytes > hw.mem_available_bytes > 0
    assert hw.os
