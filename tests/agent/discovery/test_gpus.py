"""The order of GPU sources: inventory, then NVML, then nvidia-smi, then none."""

from __future__ import annotations

import pynvml  # type: ignore[import-untyped]

from llmgw.agent.discovery import CommandResult, probe_gpus

from .fakes import NVML_ABSENT, FakeCard, FakeNvml, FakeRunner, Forbidden, smi_xml
from .hosts import inventory

SMI_ONE_L40S = smi_xml(("NVIDIA L40S", 46068, "GPU-1"))


def test_inventory_is_the_truth_when_configured() -> None:
    probe = probe_gpus(inventory=inventory("h100x8-ib2"), nvml=Forbidden(), run=Forbidden())
    assert probe.source == "inventory"
    assert len(probe.gpus) == 8


def test_nvml_when_it_answers_and_nvidia_smi_is_not_run() -> None:
    probe = probe_gpus(inventory=None, nvml=FakeNvml([FakeCard()]), run=Forbidden())
    assert probe.source == "nvml"
    assert [g.gpu_class for g in probe.gpus] == ["H100-80G"]


def test_nvml_absent_falls_through_to_nvidia_smi() -> None:
    runner = FakeRunner(CommandResult(0, SMI_ONE_L40S))
    probe = probe_gpus(inventory=None, nvml=NVML_ABSENT, run=runner)
    assert probe.source == "nvidia-smi"
    assert [(g.gpu_class, g.nvlink_peers) for g in probe.gpus] == [("L40S-45G", None)]
    assert len(runner.argvs) == 1


def test_neither_present_is_zero_cards() -> None:
    probe = probe_gpus(inventory=None, nvml=NVML_ABSENT, run=FakeRunner(None))
    assert (probe.source, probe.gpus, probe.problems, probe.driver) == ("none", [], [], "")


def test_nvml_complaint_survives_the_fall_through() -> None:
    broken = FakeNvml(init_error=pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH)
    said = "Failed to initialize NVML: Driver/library version mismatch"
    probe = probe_gpus(inventory=None, nvml=broken, run=FakeRunner(CommandResult(18, said + "\n")))
    assert probe.source == "none"
    assert probe.problems == ["NVML: RM has detected an NVML/RM version mismatch.", f"nvidia-smi exited 18: {said}"]
