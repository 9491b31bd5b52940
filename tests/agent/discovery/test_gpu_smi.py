from __future__ import annotations

from llmgw.agent.discovery import CommandResult
from llmgw.agent.discovery.gpu_smi import NVIDIA_SMI_QUERY, parse_query_line, probe_nvidia_smi

from .fakes import FakeRunner

TWO_H100 = (
    "0, NVIDIA H100 80GB HBM3, 81559, GPU-aaaaaaaa-0000-0000-0000-000000000000, 550.54.15\n"
    "1, NVIDIA H100 80GB HBM3, 81559, GPU-aaaaaaaa-0000-0000-0000-000000000001, 550.54.15\n"
)


def test_cards_from_nvidia_smi_have_unknown_topology() -> None:
    runner = FakeRunner(CommandResult(0, TWO_H100))
    probe = probe_nvidia_smi(runner)
    assert runner.argvs == [NVIDIA_SMI_QUERY]
    assert probe.source == "nvidia-smi"
    assert probe.driver == "550.54.15"
    assert [(g.index, g.gpu_class, g.memory_mib) for g in probe.gpus] == [
        (0, "H100-80G", 81559),
        (1, "H100-80G", 81559),
    ]
    assert probe.gpus[1].uuid.endswith("0001")
    assert all(g.nvlink_peers is None for g in probe.gpus)
    assert probe.problems == []


def test_not_installed_is_zero_cards_not_an_error() -> None:
    probe = probe_nvidia_smi(FakeRunner(None))
    assert (probe.source, probe.gpus, probe.problems) == ("none", [], [])


def test_no_devices_found_is_plain_absence() -> None:
    probe = probe_nvidia_smi(FakeRunner(CommandResult(6, "No devices were found\n")))
    assert (probe.source, probe.gpus, probe.problems) == ("none", [], [])


def test_driver_trouble_is_zero_cards_with_the_words() -> None:
    said = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    probe = probe_nvidia_smi(FakeRunner(CommandResult(9, said + "\n")))
    assert probe.source == "none"
    assert probe.problems == [f"nvidia-smi exited 9: {said}"]


def test_stderr_is_preferred_and_silence_is_still_reported() -> None:
    probe = probe_nvidia_smi(
        FakeRunner(CommandResult(18, "", "Failed to initialize NVML: Driver/library version mismatch\n"))
    )
    assert probe.problems == ["nvidia-smi exited 18: Failed to initialize NVML: Driver/library version mismatch"]
    assert probe_nvidia_smi(FakeRunner(CommandResult(1, ""))).problems == ["nvidia-smi exited 1 without a word"]


def test_a_lost_card_does_not_hide_the_others() -> None:
    out = TWO_H100 + "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error\n"
    probe = probe_nvidia_smi(FakeRunner(CommandResult(15, out)))
    assert probe.source == "nvidia-smi"
    assert len(probe.gpus) == 2
    assert probe.problems == [
        "nvidia-smi exited 15: Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error"
    ]


def test_parse_line_tolerates_na_memory_and_rejects_prose() -> None:
    parsed = parse_query_line("3, NVIDIA A100-SXM4-40GB, [N/A], GPU-x, 535.161.08")
    assert parsed is not None
    gpu, driver = parsed
    assert (gpu.index, gpu.memory_mib, gpu.gpu_class, driver) == (3, 0, "A100", "535.161.08")
    assert parse_query_line("No devices were found") is None
