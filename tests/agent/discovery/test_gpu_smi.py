from __future__ import annotations

import pytest

from llmgw.agent.discovery import CommandResult
from llmgw.agent.discovery.gpu_smi import NVIDIA_SMI_QUERY, probe_nvidia_smi
from llmgw.agent.discovery.gpu_smi_xml import MAX_XML_BYTES, SmiXmlError, parse_smi_xml

from .fakes import FakeRunner, smi_xml

TWO_H100 = smi_xml(
    ("NVIDIA H100 80GB HBM3", 81559, "GPU-aaaaaaaa-0000-0000-0000-000000000000"),
    ("NVIDIA H100 80GB HBM3", 81559, "GPU-aaaaaaaa-0000-0000-0000-000000000001"),
)


def test_cards_from_nvidia_smi_have_unknown_topology() -> None:
    runner = FakeRunner(CommandResult(0, TWO_H100))
    probe = probe_nvidia_smi(runner)
    assert runner.argvs == [NVIDIA_SMI_QUERY] == [["nvidia-smi", "-q", "-x"]]
    assert probe.source == "nvidia-smi"
    assert (probe.driver, probe.cuda) == ("550.54.15", "12.4")
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
    out = "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error\n" + TWO_H100
    probe = probe_nvidia_smi(FakeRunner(CommandResult(15, out)))
    assert probe.source == "nvidia-smi"
    assert len(probe.gpus) == 2
    assert probe.problems == [
        "nvidia-smi exited 15: Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error"
    ]


def test_na_memory_gives_a_class_without_a_size() -> None:
    log = parse_smi_xml(smi_xml(("NVIDIA A100-SXM4-40GB", 0, "GPU-x")).replace("0 MiB", "N/A"))
    assert [(g.memory_mib, g.gpu_class) for g in log.gpus] == [(0, "A100")]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("<html>nope</html>", "not nvidia-smi's XML"),
        ("<nvidia_smi_log><gpu>", "not XML"),
        ('<!DOCTYPE x [<!ENTITY a "aaaa">]><nvidia_smi_log>&a;</nvidia_smi_log>', "declares XML entities"),
        ("<nvidia_smi_log>" + " " * MAX_XML_BYTES + "</nvidia_smi_log>", "too large"),
    ],
)
def test_output_that_is_not_nvidia_smis_is_refused_with_words(text: str, words: str) -> None:
    with pytest.raises(SmiXmlError, match=words):
        parse_smi_xml(text)
    probe = probe_nvidia_smi(FakeRunner(CommandResult(0, text)))
    assert probe.source == "none" and probe.gpus == []
    assert len(probe.problems) == 1 and words in probe.problems[0]


@pytest.mark.parametrize(
    ("swap", "words"),
    [
        (("<total>81559 MiB</total>", "<total>" + "9" * 30 + " MiB</total>"), "card 0: "),
        (("<current_mig>N/A</current_mig>", "<current_mig>Enabled</current_mig>"
          "</mig_mode><mig_devices><mig_device><gpu_instance_id>99999</gpu_instance_id></mig_device></mig_devices>"
          "<mig_mode>"), "card 0: "),
    ],
)
def test_values_no_card_has_are_refused_not_a_crash(swap: tuple[str, str], words: str) -> None:
    text = smi_xml(("NVIDIA H100 80GB HBM3", 81559, "GPU-a")).replace(*swap)
    with pytest.raises(SmiXmlError, match=words):
        parse_smi_xml(text)
    probe = probe_nvidia_smi(FakeRunner(CommandResult(0, text)))
    assert probe.source == "none" and probe.problems[0].startswith("nvidia-smi -q -x: card 0: ")


def test_a_card_nvidia_smi_cannot_name_is_faulty_in_its_words() -> None:
    text = smi_xml(("Unknown Error", 0, "GPU-a")).replace("0 MiB", "Unknown Error")
    [card] = parse_smi_xml(text).gpus
    assert (card.faulty, card.offered_whole) == (True, False)
    assert card.fault == "nvidia-smi cannot describe the card: Unknown Error"
