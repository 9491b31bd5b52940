from __future__ import annotations

from pathlib import Path

import pytest

from llmgw.agent.discovery.gpu_inventory import probe_inventory
from llmgw.core.errors import ConfigError

from .hosts import inventory


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gpu-inventory.yaml"
    path.write_text(text)
    return path


def test_h100x8_is_eight_healthy_cards_joined_all_to_all() -> None:
    probe = probe_inventory(inventory("h100x8-ib2"))
    assert probe.source == "inventory"
    assert probe.driver == "550.54.15"
    assert [g.index for g in probe.gpus] == list(range(8))
    assert {g.gpu_class for g in probe.gpus} == {"H100-80G"}
    assert not any(g.faulty for g in probe.gpus)
    for g in probe.gpus:
        assert g.nvlink_peers == [i for i in range(8) if i != g.index]
    assert len({g.uuid for g in probe.gpus}) == 8


def test_l40s_pairs() -> None:
    probe = probe_inventory(inventory("l40sx4-pcie-pairs"))
    assert [(g.gpu_class, g.nvlink_peers) for g in probe.gpus] == [
        ("L40S-45G", [1]),
        ("L40S-45G", [0]),
        ("L40S-45G", [3]),
        ("L40S-45G", [2]),
    ]


def test_xid_makes_card_faulty_with_nvidia_words() -> None:
    gpus = probe_inventory(inventory("h100x8-ib-init")).gpus
    assert [g.index for g in gpus if g.faulty] == [3]
    assert gpus[3].fault == "Xid 79: GPU has fallen off the bus"


def test_fault_words_and_bare_faulty(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "gpus:\n"
        "  - {index: 0, name: NVIDIA A100-SXM4-40GB, memory_mib: 40960, xid: 48, fault: 'DBE at 0x1f00'}\n"
        "  - {index: 1, name: NVIDIA A100-SXM4-40GB, memory_mib: 40960, fault: 'fan stopped'}\n"
        "  - {index: 2, name: NVIDIA A100-SXM4-40GB, memory_mib: 40960, faulty: true}\n"
        "  - {index: 3, name: NVIDIA A100-SXM4-40GB, memory_mib: 40960, xid: 999}\n"
        "  - {index: 4, name: NVIDIA A100-SXM4-40GB, memory_mib: 40960}\n",
    )
    gpus = probe_inventory(path).gpus
    assert [(g.faulty, g.fault) for g in gpus] == [
        (True, "Xid 48: DBE at 0x1f00"),
        (True, "fan stopped"),
        (True, "marked faulty in the inventory"),
        (True, "Xid 999: see the NVIDIA Xid catalog"),
        (False, ""),
    ]


def test_absent_peers_mean_unknown_and_empty_means_none(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "gpus:\n"
        "  - {index: 0, name: NVIDIA L40S, memory_mib: 46068}\n"
        "  - {index: 1, name: NVIDIA L40S, memory_mib: 46068, nvlink_peers: []}\n",
    )
    assert [g.nvlink_peers for g in probe_inventory(path).gpus] == [None, []]


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("gpus:\n  - {index: 0, name: X, memory_mib: -1}\n", "gpus[0].memory_mib"),
        ("gpus:\n  - {index: 0, name: X, memory_mib: 1, colour: red}\n", "gpus[0].colour: unknown key"),
        (
            "gpus:\n  - {index: 0, name: X, memory_mib: 1}\n  - {index: 0, name: X, memory_mib: 1}\n",
            "index 0 appears twice",
        ),
        ("gpus:\n  - {index: 0, name: X, memory_mib: 1, nvlink_peers: [0]}\n", "0 is not another card"),
        (
            "gpus:\n  - {index: 0, name: X, memory_mib: 1, nvlink_peers: [1]}\n"
            "  - {index: 1, name: X, memory_mib: 1, nvlink_peers: []}\n",
            "card 0 lists 1, but card 1 does not list 0",
        ),
    ],
)
def test_invalid_inventory_names_file_and_key(tmp_path: Path, body: str, problem: str) -> None:
    path = write(tmp_path, body)
    with pytest.raises(ConfigError) as err:
        probe_inventory(path)
    assert err.value.file == str(path)
    assert any(problem in p for p in err.value.problems), err.value.problems


def test_unreadable_inventory_is_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        probe_inventory(tmp_path / "missing.yaml")


def test_a_simulated_card_in_mig_mode_is_not_offered_whole(tmp_path: Path) -> None:
    probe = probe_inventory(
        write(
            tmp_path,
            'cuda: "12.4"\n'
            "gpus:\n"
            '  - {index: 0, name: "NVIDIA A100-SXM4-80GB", memory_mib: 81920,\n'
            '     mig: [{gpu_instance: 1, memory_mib: 40192, profile: "3g.40gb"},\n'
            "           {gpu_instance: 2, memory_mib: 40192}]}\n"
            '  - {index: 1, name: "NVIDIA A100-SXM4-80GB", memory_mib: 81920, mig: []}\n'
            '  - {index: 2, name: "NVIDIA A100-SXM4-80GB", memory_mib: 81920}\n',
        )
    )
    assert probe.cuda == "12.4"
    assert [(g.index, g.offered_whole) for g in probe.gpus] == [(0, False), (1, False), (2, True)]
    mig = probe.gpus[0].mig
    assert mig is not None and [(m.gpu_instance, m.profile) for m in mig] == [(1, "3g.40gb"), (2, "")]
    assert probe.gpus[1].mig == []
