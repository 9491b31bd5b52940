"""A GPU build proven on its GPUs: once an engine first says it is ready, its processes must hold memory on every
GPU the shard was given, and on no other (NVML's per-process accounting, or nvidia-smi's). A build that reports
its GPU variant and computes elsewhere (a Vulkan build on a server without NVIDIA's Vulkan driver, a CUDA build
that found no device) fails its shard with GPUUnused in the reading's words, and the node passes over to the next
build of that engine. Where nothing can be read (no NVML, no nvidia-smi: a simulated node) nothing is claimed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from llmgw.agent.discovery.gpu_use import Given, Reading, held_on, unproven
from llmgw.wire.messages import Hardware, ShardSpec

log = logging.getLogger(__name__)

# (engine, words) -> whether the build in use was passed over for the next (False: a build named in agent.yaml, or
# a CPU one: nothing to pass over to)
Refuse = Callable[[str, str], bool]


def group_pids(pgid: int, proc: Path = Path("/proc")) -> set[int]:
    """The processes of a process group: an engine runs in a session of its own, its workers with it."""
    out = set()
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            out.add(int(d.name))
    return out


class GpuProof:
    def __init__(self, read: Callable[[], Reading], hardware: Callable[[], Hardware | None], refuse: Refuse) -> None:
        self.read, self.hardware, self.refuse = read, hardware, refuse

    async def _read(self, spec: ShardSpec, pid: int) -> tuple[list[Given], set[int], Reading] | None:
        hw = self.hardware()
        if not spec.gpus or hw is None:
            return None
        reading = await asyncio.to_thread(self.read)
        if reading.problem:
            log.info("%s rank %d: its GPU memory was not read (%s)", spec.replica_id, spec.rank, reading.problem)
            return None
        uuids = {g.index: g.uuid for g in hw.gpus}
        return [Given(i, uuids.get(i, "")) for i in spec.gpus], await asyncio.to_thread(group_pids, pid), reading

    async def held(self, spec: ShardSpec, pid: int) -> int | None:
        """The GPU memory the shard's processes hold on its GPUs, as the driver accounts it (None: not readable):
        what a sleep must free, for an engine that does not say it itself."""
        got = await self._read(spec, pid)
        return None if got is None else held_on(*got)

    async def __call__(self, spec: ShardSpec, pid: int) -> str:
        """Why the shard's engine does not run on its GPUs ("" when it does, or when no reading proves either)."""
        got = await self._read(spec, pid)
        words = "" if got is None else unproven(*got)
        if not words:
            return ""
        assert got is not None
        words = f"ready, but {words} ({got[2].source})"
        passed = self.refuse(spec.engine, words)
        return words + ("; the node passes over to the next build of " + spec.engine if passed else "")

