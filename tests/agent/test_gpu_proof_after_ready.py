"""Once an engine first says it is ready, its process group must hold memory on the GPUs its shard was given:
read from the node's per-process accounting, never the engine's word. What fails names the GPUs and the figures, and
the build in use is passed over (the refusal is the installer's); a reading that cannot be had claims nothing, and a
shard given no GPU is not read. A real process group (a process in a session of its own, a child with it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from llmgw.agent.discovery.gpu_use import Reading, Use
from llmgw.agent.supervisor.gpu_proof import GpuProof, group_pids
from llmgw.wire.messages import GPU, Hardware, ShardSpec

G0, G1 = "GPU-9a9a6c50-2a47-2f51-a902-b82c3b127e94", "GPU-d37e67a5-91dd-3774-a5cb-99096249601a"
HW = Hardware(arch="x86_64", nvidia_driver="570.172.08", gpus=[
    GPU(index=i, name="NVIDIA A100-SXM4-80GB", gpu_class="A100-80G", memory_mib=81920, uuid=u)
    for i, u in enumerate((G0, G1))])
pytestmark = pytest.mark.real  # a process group of its own

SPEC = ShardSpec(replica_id="big-1", model="big", engine="vllm", source="/m", rank=0, world_size=1, gpus=[0, 1])


@pytest.fixture
def group() -> Iterator[tuple[int, int]]:
    """(the leader's pid, its child's): an engine and a worker in a session of their own."""
    leader = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                               "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
                               "print(c.pid, flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert leader.stdout is not None
    child = int(leader.stdout.readline())
    try:
        yield leader.pid, child
    finally:
        os.killpg(leader.pid, signal.SIGKILL)  # the group this test started
        leader.wait(10)


def proof(reading: Reading, refused: list[tuple[str, str]], passes: bool = True) -> GpuProof:
    def refuse(engine: str, words: str) -> bool:
        refused.append((engine, words))
        return passes
    return GpuProof(lambda: reading, lambda: HW, refuse)


async def test_the_group_that_holds_memory_on_both_gpus_is_proven(group: tuple[int, int]) -> None:
    leader, child = group
    assert {leader, child} <= group_pids(leader)
    refused: list[tuple[str, str]] = []
    held = Reading(uses=(Use(child, G0, 30 << 30), Use(child, G1, 30 << 30)), source="nvml")
    assert await proof(held, refused)(SPEC, leader) == ""
    assert refused == []


async def test_a_build_that_holds_nothing_fails_with_the_figures_and_is_passed_over(group: tuple[int, int]) -> None:
    leader, child = group
    refused: list[tuple[str, str]] = []
    half = Reading(uses=(Use(child, G0, 30 << 30), Use(child, G1, 2 << 20)), source="nvml")
    words = await proof(half, refused)(SPEC, leader)
    assert words == ("ready, but its processes hold no memory on GPU 1 (2 MiB) of the 2 it was given (nvml); the "
                     "node passes over to the next build of vllm")
    assert refused == [("vllm", "ready, but its processes hold no memory on GPU 1 (2 MiB) of the 2 it was given "
                                "(nvml)")]
    named: list[tuple[str, str]] = []  # a build named in agent.yaml: nothing to pass over to, the shard fails alone
    assert not (await proof(half, named, passes=False)(SPEC, leader)).endswith("the next build of vllm")


async def test_no_reading_and_no_gpus_claim_nothing(group: tuple[int, int]) -> None:
    leader, _ = group
    refused: list[tuple[str, str]] = []
    assert await proof(Reading(problem="nvidia-smi is not installed"), refused)(SPEC, leader) == ""
    cpu = SPEC.model_copy(update={"gpus": []})
    assert await proof(Reading(source="nvml"), refused)(cpu, leader) == ""
    assert refused == []
