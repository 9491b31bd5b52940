from __future__ import annotations

import pytest

from llmgw.agent.discovery import gpu_class


@pytest.mark.parametrize(
    ("name", "memory_mib", "expected"),
    [
        ("NVIDIA H100 80GB HBM3", 81559, "H100-80G"),
        ("NVIDIA A100-SXM4-40GB", 40960, "A100-40G"),
        ("NVIDIA L40S", 46068, "L40S-45G"),
        ("NVIDIA A100 80GB PCIe", 81920, "A100-80G"),
        ("NVIDIA H200", 143771, "H200-140G"),
        ("Tesla V100-SXM2-32GB", 32768, "V100-32G"),
        ("NVIDIA GeForce RTX 4090", 24564, "RTX4090-24G"),
        ("NVIDIA RTX A6000", 49140, "RTXA6000-48G"),
        ("NVIDIA GH200 480GB", 97871, "GH200-96G"),
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", 97887, "RTXPRO6000-96G"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887, "RTXPRO6000-96G"),
        ("Quadro RTX 8000", 48601, "RTX8000-47G"),
        ("NVIDIA RTX 4000 SFF Ada Generation", 20475, "RTX4000-20G"),
        # a Ti or SUPER is another card than the plain number, at times with the same memory
        ("GeForce RTX 2080 Ti", 10989, "RTX2080TI-11G"),
        ("NVIDIA GeForce RTX 4070 Ti SUPER", 16376, "RTX4070TISUPER-16G"),
        ("NVIDIA GeForce RTX 4070 SUPER", 12282, "RTX4070SUPER-12G"),
        # GRID is a brand: the model is the card (or, in a vGPU guest, the card the slice is cut from)
        ("GRID K520", 4095, "K520-4G"),
        ("GRID P4-1Q", 1024, "P4-1G"),
        # a driver older than the card does not know its name: no model, not a model called "GRAPHICS"
        ("Graphics Device", 5912, "UNKNOWN-6G"),
    ],
)
def test_class_is_model_and_reported_gib(name: str, memory_mib: int, expected: str) -> None:
    assert gpu_class(name, memory_mib) == expected


def test_size_comes_from_memory_not_from_name() -> None:
    # the name says 40GB; the card says 80 GiB: the card wins
    assert gpu_class("NVIDIA A100-SXM4-40GB", 81920) == "A100-80G"


def test_half_gib_rounds_up() -> None:
    assert gpu_class("NVIDIA L40S", 45568) == "L40S-45G"  # 44.5 GiB


def test_unknown_memory_leaves_model_only() -> None:
    assert gpu_class("NVIDIA H100 80GB HBM3", 0) == "H100"


def test_empty_name() -> None:
    assert gpu_class("", 1024) == "UNKNOWN-1G"
