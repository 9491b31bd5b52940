from __future__ import annotations

import pynvml  # type: ignore[import-untyped]

from llmgw.agent.discovery.gpu_nvml import normalize_pci_bus_id, probe_nvml

from .fakes import FakeCard, FakeNvml

GPU_LINK = pynvml.NVML_NVLINK_DEVICE_TYPE_GPU
SWITCH_LINK = pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH


def bus(i: int) -> str:
    return f"00000000:{0x18 + i * 0x10:02X}:00.0"


def test_library_missing_is_no_nvml_without_complaint() -> None:
    probe = probe_nvml(FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    assert (probe.source, probe.gpus, probe.problems) == ("none", [], [])


def test_driver_not_loaded_is_no_nvml_without_complaint() -> None:
    probe = probe_nvml(FakeNvml(init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    assert (probe.source, probe.problems) == ("none", [])


def test_other_init_failure_falls_through_with_nvml_words() -> None:
    probe = probe_nvml(FakeNvml(init_error=pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH))
    assert probe.source == "none"
    assert probe.problems == ["NVML: RM has detected an NVML/RM version mismatch."]


def test_hgx_cards_behind_nvswitch_all_peer() -> None:
    switch_bus = "00000000:05:00.0"
    cards = [FakeCard(uuid=f"GPU-{i}", bus_id=bus(i), links=[(SWITCH_LINK, switch_bus)] * 18) for i in range(8)]
    nvml = FakeNvml(cards)
    probe = probe_nvml(nvml)
    assert probe.source == "nvml"
    assert probe.driver == "550.54.15"
    assert [g.gpu_class for g in probe.gpus] == ["H100-80G"] * 8
    assert [g.uuid for g in probe.gpus] == [f"GPU-{i}" for i in range(8)]
    for g in probe.gpus:
        assert g.nvlink_peers == [i for i in range(8) if i != g.index]
    assert nvml.calls[-1] == "nvmlShutdown"


def test_bridged_pairs_map_remote_bus_ids_to_indices() -> None:
    # the remote side may be written with a 4-digit domain and lower case; it is the same device
    def remote(i: int) -> str:
        return "0000:" + bus(i)[9:].lower()

    cards = [
        FakeCard(name=b"NVIDIA A40", memory_mib=46068, bus_id=bus(i), links=[(GPU_LINK, remote(i ^ 1))] * 4)
        for i in range(4)
    ]
    probe = probe_nvml(FakeNvml(cards))
    assert [g.name for g in probe.gpus] == ["NVIDIA A40"] * 4
    assert [g.nvlink_peers for g in probe.gpus] == [[1], [0], [3], [2]]


def test_card_without_nvlink_has_known_empty_peers() -> None:
    card = FakeCard(name="NVIDIA L40S", memory_mib=46068, past_links=pynvml.NVML_ERROR_NOT_SUPPORTED)
    probe = probe_nvml(FakeNvml([card]))
    assert probe.gpus[0].nvlink_peers == []
    assert probe.gpus[0].gpu_class == "L40S-45G"


def test_link_query_failure_leaves_topology_unknown() -> None:
    card = FakeCard(links=[(GPU_LINK, bus(1))], fail={"nvmlDeviceGetNvLinkState": pynvml.NVML_ERROR_UNKNOWN})
    assert probe_nvml(FakeNvml([card, FakeCard(bus_id=bus(1))])).gpus[0].nvlink_peers is None


def test_retired_pages_pending_is_faulty() -> None:
    probe = probe_nvml(FakeNvml([FakeCard(retired_pending=pynvml.NVML_FEATURE_ENABLED)]))
    assert probe.gpus[0].faulty
    assert "retired pages pending" in probe.gpus[0].fault


def test_row_remapping_failure_is_faulty() -> None:
    probe = probe_nvml(FakeNvml([FakeCard(remapped=(0, 3, 0, 1)), FakeCard(bus_id=bus(1))]))
    assert probe.gpus[0].faulty and "row remapping failure" in probe.gpus[0].fault
    assert not probe.gpus[1].faulty


def test_health_not_supported_is_healthy() -> None:
    card = FakeCard(
        fail={
            "nvmlDeviceGetRetiredPagesPendingStatus": pynvml.NVML_ERROR_NOT_SUPPORTED,
            "nvmlDeviceGetRemappedRows": pynvml.NVML_ERROR_NOT_SUPPORTED,
        }
    )
    assert not probe_nvml(FakeNvml([card])).gpus[0].faulty


def test_lost_card_is_listed_faulty_and_the_rest_still_described() -> None:
    lost = FakeCard(fail={"nvmlDeviceGetName": pynvml.NVML_ERROR_GPU_IS_LOST})
    probe = probe_nvml(FakeNvml([FakeCard(bus_id=bus(0)), lost]))
    assert probe.source == "nvml"
    assert [g.faulty for g in probe.gpus] == [False, True]
    assert probe.gpus[1].fault == "NVML: GPU is lost"
    assert probe.gpus[1].nvlink_peers is None


def test_count_failure_is_a_problem_not_a_crash() -> None:
    class CountFails(FakeNvml):
        def nvmlDeviceGetCount(self) -> int:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)

    nvml = CountFails()
    probe = probe_nvml(nvml)
    assert probe.source == "none"
    assert probe.problems == ["NVML: cannot count the GPUs: Unknown Error"]
    assert nvml.calls[-1] == "nvmlShutdown"


def test_normalize_pci_bus_id() -> None:
    assert normalize_pci_bus_id("00000000:3B:00.0") == "0000:3b:00.0"
    assert normalize_pci_bus_id("0000:3b:00.0") == "0000:3b:00.0"
    assert normalize_pci_bus_id("3b:00.0") == "3b:00.0"
