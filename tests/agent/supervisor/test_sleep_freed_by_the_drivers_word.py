"""vLLM says nothing of the GPU memory it holds: after it says it sleeps, what its processes still hold on its GPUs
is read from the driver's per-process accounting (here a fake NVML) rather than taken on its word. A level-1 sleep
that leaves the weights on the GPU (vLLM releases have leaked 6-16 GB a GPU) is tried again at level 2; one that
frees nothing at either level fails with SleepFailed and the figures. A real process group, a played vLLM."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import aiohttp
import pytest
from aiohttp import web

from llmgw.agent.discovery.gpu_use import read_nvml
from llmgw.agent.engines.vllm import SLEEP
from llmgw.agent.supervisor.gpu_proof import GpuProof
from llmgw.agent.supervisor.sleeping import Engine, ShardSleep, outcome, put_to_sleep
from llmgw.core.reasons import Reason
from llmgw.wire.messages import GPU, Hardware, ShardSpec
from tests.agent.discovery.test_gpu_use_per_process import FakeNvml
from tests.harness import served

GiB = 1 << 30
G0 = "GPU-9a9a6c50-2a47-2f51-a902-b82c3b127e94"
HW = Hardware(arch="x86_64", nvidia_driver="570.172.08", gpus=[
    GPU(index=0, name="NVIDIA A100-SXM4-80GB", gpu_class="A100-80G", memory_mib=81920, uuid=G0)])
SPEC = ShardSpec(replica_id="big-1", model="big", engine="vllm", source="/m", rank=0, world_size=1, gpus=[0])


@pytest.fixture
def engine_pid() -> Iterator[int]:
    """An engine's process, in a session of its own."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        yield p.pid
    finally:
        os.killpg(p.pid, signal.SIGKILL)  # the group this test started
        p.wait(10)


async def sleep_with(pid: int, left: dict[int, int]) -> tuple[list[str], tuple[str, str, str] | None]:
    """Put a played vLLM to sleep at level 1 while the fake NVML says its process holds 30 GiB awake and left[N]
    after a sleep at level N: the calls it got, and the outcome."""
    calls: list[str] = []
    level = {"now": 0}
    nvml = FakeNvml({G0: []})

    async def vllm(request: web.Request) -> web.StreamResponse:
        calls.append(request.path_qs)
        if request.path == "/sleep":
            level["now"] = int(request.query["level"])
        elif request.path == "/wake_up":
            level["now"] = 0
        if request.path == "/is_sleeping":
            nvml.procs[G0] = [(pid, left[level["now"]] if level["now"] else 30 * GiB)]
            return web.json_response({"is_sleeping": level["now"] > 0})  # and nothing of its memory
        if request.path == "/wake_up":  # the level-2 wake's steps (test_wake_from_level_two.py)
            return web.json_response({"status": "sleeping" if "weights" in request.path_qs else "awake"})
        if request.path == "/reset_prefix_cache":
            return web.json_response({"success": True})
        return web.json_response({"results": [None]})

    proof = GpuProof(lambda: read_nvml(nvml), lambda: HW, lambda engine, words: False)
    async with served(vllm) as url, aiohttp.ClientSession() as http:
        s = ShardSleep()
        s.task = asyncio.create_task(put_to_sleep(Engine(http, url, "", SLEEP, lambda: proof.held(SPEC, pid)), 1))
        await asyncio.wait([s.task])
        return calls, outcome(s)


async def test_a_level_one_sleep_that_freed_the_gpu_is_believed(engine_pid: int) -> None:
    calls, got = await sleep_with(engine_pid, {1: 512 << 20})
    assert calls == ["/is_sleeping", "/sleep?level=1", "/is_sleeping"]
    assert got == ("sleeping", Reason.Sleeping, "asleep at level 1: 512 MiB of 30720 MiB still held")


async def test_a_leak_at_level_one_falls_back_to_level_two(engine_pid: int) -> None:
    calls, got = await sleep_with(engine_pid, {1: 16 * GiB, 2: 300 << 20})
    assert calls == ["/is_sleeping", "/sleep?level=1", "/is_sleeping", "/wake_up", "/sleep?level=2", "/is_sleeping"]
    assert got == ("sleeping", Reason.Sleeping, "asleep at level 2: 300 MiB of 30720 MiB still held")


async def test_nothing_freed_at_either_level_fails_with_the_figures(engine_pid: int) -> None:
    _, got = await sleep_with(engine_pid, {1: 16 * GiB, 2: 16 * GiB})
    assert got == ("failed", Reason.SleepFailed, "GPU memory not freed after sleep: level 1 left 16384 MiB of 30720 "
                                                 "MiB held; level 2 left 16384 MiB of 30720 MiB held")
