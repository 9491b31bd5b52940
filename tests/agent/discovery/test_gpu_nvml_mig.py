"""MIG and the CUDA version through NVML: a card in MIG mode is reported with its instances, not as a whole card."""

from __future__ import annotations

import pynvml  # type: ignore[import-untyped]

from llmgw.agent.discovery.gpu_nvml import probe_nvml

from .fakes import FakeCard, FakeMig, FakeNvml

A100 = "NVIDIA A100-SXM4-80GB"


def test_a_mig_card_lists_its_instances_with_their_profiles() -> None:
    slices = [
        FakeMig(name=f"{A100} MIG 3g.40gb", memory_mib=40192, gpu_instance=1, multiprocessors=42),
        None,  # an empty slot, as NVML answers NOT_FOUND for it
        FakeMig(name=f"{A100} MIG 1g.10gb", memory_mib=9856, gpu_instance=9, multiprocessors=14),
    ]
    probe = probe_nvml(FakeNvml([FakeCard(name=A100, memory_mib=81920, mig=slices), FakeCard(name=A100)]))
    mig_card, whole_card = probe.gpus
    assert mig_card.mig is not None and not mig_card.offered_whole and not mig_card.faulty
    assert [(m.profile, m.memory_mib, m.gpu_instance, m.compute_instance, m.multiprocessors) for m in mig_card.mig] == [
        ("3g.40gb", 40192, 1, 0, 42),
        ("1g.10gb", 9856, 9, 0, 14),
    ]
    assert (whole_card.mig, whole_card.offered_whole) == (None, True)


def test_mig_on_with_no_instances_is_still_not_whole() -> None:
    [card] = probe_nvml(FakeNvml([FakeCard(mig=[])])).gpus
    assert (card.mig, card.offered_whole) == ([], False)


def test_instances_nvml_cannot_list_leave_mig_on_and_the_card_not_whole() -> None:
    nvml = FakeNvml([FakeCard(mig=[FakeMig()], fail={"nvmlDeviceGetMaxMigDeviceCount": pynvml.NVML_ERROR_UNKNOWN})])
    [card] = probe_nvml(nvml).gpus
    assert (card.mig, card.offered_whole) == ([], False)


def test_a_detail_nvml_withholds_keeps_the_instance() -> None:
    nvml = FakeNvml([FakeCard(mig=[FakeMig()], fail={"nvmlDeviceGetAttributes": pynvml.NVML_ERROR_NOT_SUPPORTED})])
    [card] = probe_nvml(nvml).gpus
    assert card.mig is not None
    assert [(m.profile, m.multiprocessors) for m in card.mig] == [("3g.40gb", 0)]


def test_the_cuda_version_is_nvmls_number_in_words() -> None:
    assert probe_nvml(FakeNvml([FakeCard()], cuda=12020)).cuda == "12.2"
    assert probe_nvml(FakeNvml([FakeCard()], cuda=13000)).cuda == "13.0"
    failing = FakeNvml([FakeCard()])
    failing.cuda = 0
    assert probe_nvml(failing).cuda == ""
