"""What each process holds on each GPU, read as nvidia-smi prints it (`--query-compute-apps=pid,gpu_uuid,used_memory
--format=csv,noheader,nounits`) or as NVML lists it, every line checked; and the proof a shard's engine runs on
exactly the GPUs it was given, from that reading."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from llmgw.agent.discovery.commands import CommandResult
from llmgw.agent.discovery.gpu_use import (
    QUERY,
    STANDIN,
    Given,
    Reading,
    Use,
    read_nvml,
    read_smi,
    read_standin,
    reader,
    unproven,
)

G0, G1, G2 = ("GPU-9a9a6c50-2a47-2f51-a902-b82c3b127e94", "GPU-d37e67a5-91dd-3774-a5cb-99096249601a",
              "GPU-37037c3f-65c8-ec4d-24a9-420204ad8026")
MiB = 1 << 20


def smi(stdout: str, code: int = 0, stderr: str = "") -> Any:
    def run(argv: Sequence[str]) -> CommandResult | None:
        assert list(argv) == QUERY
        return CommandResult(code, stdout, stderr)
    return run


def test_nvidia_smis_lines_are_read_in_bytes() -> None:
    got = read_smi(smi(f"2178337, {G0}, 4232\n2178337, {G1}, 4232\n91, {G2}, [N/A]\n"))
    assert got == Reading(uses=(Use(2178337, G0, 4232 * MiB), Use(2178337, G1, 4232 * MiB), Use(91, G2, None)),
                          source="nvidia-smi")
    assert read_smi(smi("")) == Reading(source="nvidia-smi")  # nothing holds GPU memory


def test_what_nvidia_smi_cannot_say_is_a_problem_never_a_zero() -> None:
    assert read_smi(lambda argv: None).problem == "nvidia-smi is not installed"
    failed = read_smi(smi("", 9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."))
    assert failed.problem.startswith("nvidia-smi --query-compute-apps exited 9: NVIDIA-SMI has failed")
    for bad in (f"x, {G0}, 10", f"12, {G0}", f"12, {G0}, -5", f"12, {G0}, 99999999999", f"0, {G0}, 1", "12, , 3"):
        assert read_smi(smi(bad + "\n")).problem.startswith("nvidia-smi --query-compute-apps: cannot read"), bad
    assert "more than any node runs" in read_smi(smi(f"1, {G0}, 1\n" * 5000)).problem


class FakeNvml:
    def __init__(self, procs: dict[str, list[tuple[int, int | None]]], fail: str = "") -> None:
        self.procs, self.fail, self.shut = procs, fail, False

    def nvmlInit(self) -> None:
        if self.fail:
            raise RuntimeError(self.fail)

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlDeviceGetCount(self) -> int:
        return len(self.procs)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return list(self.procs)[index]

    def nvmlDeviceGetUUID(self, handle: str) -> bytes:
        return handle.encode()  # older pynvml answers bytes

    def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> list[Any]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self.procs[handle]]


def test_nvml_per_process_accounting_and_its_failures() -> None:
    nvml = FakeNvml({G0: [(7, 3 << 30)], G1: [(7, None)]})
    assert read_nvml(nvml) == Reading(uses=(Use(7, G0, 3 << 30), Use(7, G1, None)), source="nvml")
    assert nvml.shut
    assert read_nvml(FakeNvml({}, fail="Driver Not Loaded")).problem == "NVML: Driver Not Loaded"


def test_nvml_first_nvidia_smi_where_it_cannot_and_a_simulated_node_reads_its_stand_in(tmp_path: Path) -> None:
    assert reader(FakeNvml({G0: [(7, 1 << 30)]}), smi("garbage"), None)().source == "nvml"
    assert reader(FakeNvml({}, fail="Library Not Found"), smi(f"7, {G0}, 100\n"), None)().source == "nvidia-smi"
    inventory = tmp_path / "gpus.json"
    read = reader(FakeNvml({G0: [(7, 1 << 30)]}), smi("never asked"), inventory)
    assert read().problem == f"{STANDIN}: No such file or directory"  # nothing to read: nothing claimed
    (tmp_path / STANDIN).write_text(f"7, {G0}, 100\n")
    assert read() == read_standin(tmp_path / STANDIN) == Reading(uses=(Use(7, G0, 100 * MiB),),
                                                                 source=f"stand-in {STANDIN}")


GIVEN = [Given(0, G0), Given(1, G1)]


def test_a_shard_that_holds_memory_on_each_gpu_it_was_given_is_proven() -> None:
    reading = Reading(uses=(Use(10, G0, 30 << 30), Use(11, G1, 30 << 30), Use(99, G2, 5 << 30)), source="nvml")
    assert unproven(GIVEN, {10, 11}, reading) == ""


def test_a_build_that_holds_nothing_on_its_gpus_is_named_with_the_figures() -> None:
    reading = Reading(uses=(Use(10, G0, 30 << 30), Use(10, G1, 3 * MiB)), source="nvml")
    assert unproven(GIVEN, {10}, reading) == "its processes hold no memory on GPU 1 (3 MiB) of the 2 it was given"
    assert unproven(GIVEN, {10}, Reading(source="nvml")) == (
        "its processes hold no memory on GPU 0 (0 MiB), GPU 1 (0 MiB) of the 2 it was given")


def test_memory_on_a_gpu_it_was_not_given_is_named() -> None:
    reading = Reading(uses=(Use(10, G0, 30 << 30), Use(10, G1, 30 << 30), Use(10, G2, 2 << 30)), source="nvml")
    assert unproven(GIVEN, {10}, reading) == f"they hold memory on GPU(s) it was not given: {G2}"


def test_unaccounted_memory_and_foreign_process_numbers_prove_nothing_either_way() -> None:
    assert unproven(GIVEN, {10}, Reading(uses=(Use(10, G0, None), Use(10, G1, 1 << 30)), source="nvml")) == ""
    # none of its processes listed (another PID namespace): what the given GPUs hold is its engine's
    seen = Reading(uses=(Use(4000, G0, 30 << 30), Use(4001, G1, 30 << 30)), source="nvidia-smi")
    assert unproven(GIVEN, {10}, seen) == ""
    half = Reading(uses=(Use(4000, G0, 30 << 30),), source="nvidia-smi")
    assert unproven(GIVEN, {10}, half) == "its processes hold no memory on GPU 1 (0 MiB) of the 2 it was given"
