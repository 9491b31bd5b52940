from __future__ import annotations

from pathlib import Path

from llmgw.agent.discovery import HostRoot
from llmgw.agent.discovery.cpu import parse_cpuinfo, probe_cpu
from llmgw.wire.messages import CPU

from .hosts import host


def test_kvm64_vm_lacks_avx2() -> None:
    cpu = probe_cpu(host("vm-noavx2"))
    assert cpu == CPU(model="Common KVM processor", cores=4, avx2=False, avx512f=False, amx=False)


def test_ice_lake_has_avx2_and_avx512_but_no_amx() -> None:
    cpu = probe_cpu(host("cpu-avx2"))
    assert cpu.model == "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz"
    assert cpu.cores == 4
    assert (cpu.avx2, cpu.avx512f, cpu.amx) == (True, True, False)


def test_sapphire_rapids_has_amx() -> None:
    cpu = probe_cpu(host("h100x8-ib2"))
    assert (cpu.avx2, cpu.avx512f, cpu.amx) == (True, True, True)


def test_amd_genoa() -> None:
    cpu = probe_cpu(host("l40sx4-pcie-pairs"))
    assert cpu.model == "AMD EPYC 9354 32-Core Processor"
    assert (cpu.avx2, cpu.avx512f, cpu.amx) == (True, True, False)


def test_arm64_features_line_counts_too() -> None:
    text = "processor\t: 0\nFeatures\t: fp asimd sve\nCPU part\t: 0xd4f\n\nprocessor\t: 1\nFeatures\t: fp asimd sve\n"
    assert parse_cpuinfo(text) == CPU(model="", cores=2)


def test_amx_is_the_amx_tile_flag() -> None:
    assert parse_cpuinfo("processor : 0\nflags : avx2 amx_bf16\n").amx is False
    assert parse_cpuinfo("processor : 0\nflags : avx2 amx_tile\n").amx is True


def test_missing_cpuinfo_is_unknown(tmp_path: Path) -> None:
    assert probe_cpu(HostRoot(tmp_path)) == CPU()
