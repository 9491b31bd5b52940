"""Discovery over real `nvidia-smi -q -x` outputs (tests/fixtures/nvidia-smi/README.md says where each is from).

NVML is absent, so the agent falls back to nvidia-smi; the nvidia-smi it runs is a real program on PATH that prints
the recorded output, and discovery runs it through its real command runner.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from llmgw.agent.discovery import discover, hardware_warnings
from llmgw.agent.discovery.commands import run_command
from llmgw.wire.messages import Hardware

from .fakes import NVML_ABSENT
from .hosts import host

pytestmark = pytest.mark.real  # processes: the unit tier leaves this file out (tests/tiers.py)

OUTPUTS = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia-smi"


def fake_nvidia_smi(bin_dir: Path, output: Path) -> None:
    """An nvidia-smi that answers `-q -x` with the recorded output and refuses anything else."""
    script = bin_dir / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        '[ "$*" = "-q -x" ] || { echo "unexpected arguments: $*" >&2; exit 2; }\n'
        f"exec cat '{output}'\n"
    )
    script.chmod(0o755)


def discover_with(output: str | Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Hardware:
    """Discovery on a recorded output (a name under OUTPUTS) or on a file a test made from one."""
    path = output if isinstance(output, Path) else OUTPUTS / output
    assert path.is_file(), f"no recorded output {path}"
    fake_nvidia_smi(tmp_path, path)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return discover(
        host("cpu-avx2"), inventory=None, weights_dir=None, default_arch="x86_64", run=run_command, nvml=NVML_ABSENT
    )


@dataclass(frozen=True)
class Seen:
    name: str
    gpu_class: str
    memory_mib: int
    uuid: str
    driver: str
    cuda: str


MACHINES = {
    "a10g.xml": Seen(
        "NVIDIA A10G", "A10G-22G", 23028, "GPU-9a9a6c50-2a47-2f51-a902-b82c3b127e94", "515.105.01", "11.7"
    ),
    "tesla-t4.xml": Seen(
        "Tesla T4", "T4-15G", 15360, "GPU-d37e67a5-91dd-3774-a5cb-99096249601a", "515.105.01", "11.7"
    ),
    "rtx-4000-sff-ada.xml": Seen(
        "NVIDIA RTX 4000 SFF Ada Generation", "RTX4000-20G", 20475, "GPU-37037c3f-65c8-ec4d-24a9-420204ad8026",
        "595.84", "13.2",
    ),
    "rtx-3090.xml": Seen(
        "NVIDIA GeForce RTX 3090", "RTX3090-24G", 24576, "GPU-12345678-aaaa-bbbb-cccc-0123456789ab", "525.147.05",
        "12.0",
    ),
    "quadro-p2000.xml": Seen(
        "Quadro P2000", "P2000-5G", 5120, "GPU-396caaed-39ca-3199-2e68-717cdb786ec6", "525.125.06", "12.0"
    ),
    "rtx-pro-6000-blackwell.xml": Seen(
        "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "RTXPRO6000-96G", 97887,
        "GPU-12345678-aaaa-bbbb-cccc-0123456789ab", "590.44.01", "13.1",
    ),
    "gtx-1660-ti.xml": Seen(
        "Graphics Device", "UNKNOWN-6G", 5912, "GPU-304a277d-3545-63b8-3a36-dfde3c992989", "418.43", "10.1"
    ),
    # a vGPU guest: a 1 GiB slice of a Tesla P4 that the VM sees as a card of its own; "GRID" is a brand, not a model
    "grid-p4-1q-vgpu.xml": Seen(
        "GRID P4-1Q", "P4-1G", 1024, "GPU-1b1ea7c7-1c4b-ed49-1c72-26c65f2dd207", "513.46", "11.6"
    ),
}


@pytest.mark.parametrize("output", sorted(MACHINES))
def test_each_healthy_machine_is_one_whole_card(output: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    want = MACHINES[output]
    hw = discover_with(output, tmp_path, monkeypatch)
    assert (hw.gpu_source, hw.nvidia_driver, hw.nvidia_cuda, hw.gpu_problems) == (
        "nvidia-smi", want.driver, want.cuda, []
    )
    assert [(g.index, g.name, g.gpu_class, g.memory_mib, g.uuid) for g in hw.gpus] == [
        (0, want.name, want.gpu_class, want.memory_mib, want.uuid)
    ]
    card = hw.gpus[0]
    assert (card.faulty, card.fault, card.mig, card.offered_whole) == (False, "", None, True)
    assert card.nvlink_peers is None  # nvidia-smi -q -x does not say
    assert [p.code for p in hardware_warnings(hw)] == ["NVLinkUnknown"]


def test_two_cards_in_nvidia_smis_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hw = discover_with("rtx-a5000x2.xml", tmp_path, monkeypatch)
    assert (hw.gpu_source, hw.nvidia_driver, hw.nvidia_cuda, hw.gpu_problems) == ("nvidia-smi", "590.44.01", "13.1", [])
    assert [(g.index, g.gpu_class, g.memory_mib, g.uuid[-2:], g.offered_whole) for g in hw.gpus] == [
        (0, "RTXA5000-24G", 24564, "ab", True),
        (1, "RTXA5000-24G", 24564, "cd", True),
    ]


def test_two_consumer_cards_keep_their_ti(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # an RTX 2080 Ti is not an RTX 2080 (8 GB, slower); the class keeps the suffix the name carries
    hw = discover_with("rtx-2080-tix2.xml", tmp_path, monkeypatch)
    assert (hw.nvidia_driver, hw.nvidia_cuda, hw.gpu_problems) == ("410.73", "10.0", [])
    assert [(g.index, g.name, g.gpu_class, g.memory_mib, g.uuid, g.offered_whole) for g in hw.gpus] == [
        (0, "GeForce RTX 2080 Ti", "RTX2080TI-11G", 10989, "GPU-57567e11-0be2-381b-5132-2ad95c262e58", True),
        (1, "GeForce RTX 2080 Ti", "RTX2080TI-11G", 10989, "GPU-ef1d0068-5bfd-f1e4-7e79-ff35d71d44b8", True),
    ]


def test_four_k80s_in_nvidia_smis_order_healthy_despite_their_ecc_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hw = discover_with("tesla-k80x4.xml", tmp_path, monkeypatch)
    # driver 430 says "Not Found" for the CUDA version: not said, not a version called that
    assert (hw.nvidia_driver, hw.nvidia_cuda, hw.gpu_problems) == ("430.26", "", [])
    # the index is nvidia-smi's (NVML's) order; the minor numbers (/dev/nvidiaN) run 1, 2, 3, 0 and are not it
    assert [(g.index, g.gpu_class, g.memory_mib, g.uuid) for g in hw.gpus] == [
        (0, "K80-11G", 11441, "GPU-c3b26f7a-8dcb-619c-fa1b-8029265a4db0"),
        (1, "K80-11G", 11441, "GPU-b01b80eb-0f18-1df0-cf88-0725bd90f1e1"),
        (2, "K80-11G", 11441, "GPU-30bc2701-3bc2-5f35-0ebd-9867a077e138"),
        (3, "K80-11G", 11441, "GPU-3341aba2-f01d-2c1f-7dd4-e389779faec2"),
    ]
    # cards 0 and 1 have lifetime ECC errors and pages already retired, none since the driver loaded and none
    # pending: usable, so offered
    assert all(not g.faulty and g.offered_whole for g in hw.gpus)


def test_a_k80_with_a_retirement_pending_in_its_drivers_words_is_faulty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # driver 430 names the flag pending_blacklist, with no pending_retirement beside it (410, 418 and 513 on say
    # pending_retirement): the recorded K80 says No; here the same output with card 0 saying Yes
    real = (OUTPUTS / "tesla-k80x4.xml").read_text()
    assert real.count("<pending_blacklist>No</pending_blacklist>") == 4 and "pending_retirement" not in real
    pending = tmp_path / "k80-pending.xml"
    pending.write_text(real.replace("<pending_blacklist>No", "<pending_blacklist>Yes", 1))
    hw = discover_with(pending, tmp_path, monkeypatch)
    assert [(g.faulty, g.fault) for g in hw.gpus] == [
        (True, "retired pages pending: reset the GPU to retire them"), (False, ""), (False, ""), (False, "")
    ]


def test_a_v100_with_a_double_bit_error_and_a_retirement_pending_is_faulty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one card of a 16-card DGX-2, as its keeper trimmed it; a real fault, not a derived one
    hw = discover_with("v100-sxm3-32gb-retired-pages.xml", tmp_path, monkeypatch)
    assert (hw.nvidia_driver, hw.nvidia_cuda, hw.gpu_problems) == ("410.104", "10.0", [])
    [card] = hw.gpus
    assert (card.name, card.gpu_class, card.memory_mib, card.uuid) == (
        "Tesla V100-SXM3-32GB", "V100-32G", 32480, "GPU-ef23ffa6-c9fd-93d5-aeb8-612c087255ff"
    )
    assert card.faulty and not card.offered_whole
    assert card.fault == (
        "retired pages pending: reset the GPU to retire them; 1 uncorrectable ECC error(s) since the driver loaded"
    )
    assert [p.code for p in hardware_warnings(hw)] == ["GPUFaulty"]


def test_a_mig_card_reports_its_instances_and_is_not_offered_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hw = discover_with("a100-sxm4-80gb-mig.xml", tmp_path, monkeypatch)
    assert (hw.nvidia_driver, hw.nvidia_cuda) == ("535.54.03", "12.2")
    [card] = hw.gpus
    assert (card.name, card.gpu_class, card.memory_mib) == ("NVIDIA A100-SXM4-80GB", "A100-80G", 81920)
    assert not card.faulty
    assert card.mig is not None and not card.offered_whole
    assert [(m.gpu_instance, m.compute_instance, m.memory_mib, m.multiprocessors) for m in card.mig] == [
        (3, 0, 19968, 14),
        (4, 0, 19968, 14),
        (5, 0, 19968, 14),
        (6, 0, 19968, 14),
    ]
    # what ctl nodes and the dashboard show; a card not offered whole has no topology to miss
    assert [(p.code, p.message) for p in hardware_warnings(hw)] == [
        ("GPUInMIGMode", "GPU 0 (A100-80G) is in MIG mode with 4 instances: not offered whole")
    ]


def test_a_pending_row_remap_keeps_the_card_out_in_nvidia_smis_terms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hw = discover_with("a10g-row-remap-pending.xml", tmp_path, monkeypatch)
    [card] = hw.gpus
    assert card.faulty and not card.offered_whole
    assert card.fault == (
        "row remapping pending: reset the GPU to apply it; 1 uncorrectable ECC error(s) since the driver loaded"
    )
    assert [p.code for p in hardware_warnings(hw)] == ["GPUFaulty"]
    # the healthy original of the same card is not faulty: the four changed values are what made it so
    assert not discover_with("a10g.xml", tmp_path, monkeypatch).gpus[0].faulty


def test_every_recorded_output_is_listed_with_its_origin_and_tested_here() -> None:
    recorded = sorted(p.name for p in OUTPUTS.glob("*.xml"))
    readme = (OUTPUTS / "README.md").read_text()
    here = Path(__file__).read_text()
    assert len(recorded) >= 14
    assert [f for f in recorded if f"| {f} |" not in readme] == []
    assert [f for f in recorded if f'"{f}"' not in here] == []


# Faithful edits (the README says of what): a real card's output with only its driver and CUDA versions changed, for
# the long-term-support drivers no public project keeps an output of
DERIVED = {
    "a100-sxm4-80gb-mig-driver-550-derived.xml": ("550.163.01", "12.4"),
    "a100-sxm4-80gb-mig-driver-570-derived.xml": ("570.172.08", "12.8"),
    "rtx-4000-sff-ada-driver-580-derived.xml": ("580.95.05", "13.0"),
}


@pytest.mark.parametrize("output", sorted(DERIVED))
def test_a_derived_output_reads_as_its_original_but_for_the_driver(
    output: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = output.split("-driver-")[0] + ".xml"
    hw = discover_with(output, tmp_path, monkeypatch)
    assert (hw.nvidia_driver, hw.nvidia_cuda) == DERIVED[output]
    same = discover_with(original, tmp_path, monkeypatch)
    assert [(g.name, g.uuid, g.memory_mib) for g in hw.gpus] == [(g.name, g.uuid, g.memory_mib) for g in same.gpus]
