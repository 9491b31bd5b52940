"""CPU accounting for the router bench, from /proc (Linux): what the server under test, the stand-in and the load
generator each spent in a cell, and what other processes on the machine took meanwhile (noise)."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path

NOISY_CORES = 0.25  # CPU that other processes may take during a cell before the bench calls the cell noisy

# CPU accounting from /proc (Linux): on 2 cores the proxy, the stand-in and this process share the CPUs, and
# anything else running on the machine shows up as noise; each cell says how much there was.
TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _proc_stats() -> dict[int, tuple[int, float]]:
    """pid -> (ppid, CPU seconds) for every process; CPU from schedstat (nanoseconds), summed over its threads."""
    out: dict[int, tuple[int, float]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            raw = Path(f"/proc/{d}/stat").read_text()
            ns = 0
            for task in os.listdir(f"/proc/{d}/task"):
                ns += int(Path(f"/proc/{d}/task/{task}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        out[int(d)] = (int(raw[raw.rindex(")") + 2 :].split()[1]), ns / 1e9)
    return out


def tree_cpu(stats: dict[int, tuple[int, float]], root: int) -> float:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += stats.get(pid, (0, 0.0))[1]
        todo += children.get(pid, [])
    return total


def machine_busy() -> float:
    """CPU seconds all CPUs spent busy since boot."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(f[:8]) - f[3] - f[4]) / TICK


@dataclass
class CpuSnap:
    server: float
    standin: float
    client: float
    busy: float

    @staticmethod
    def take(server: int, standin: int) -> CpuSnap | None:
        if not Path("/proc/stat").exists():
            return None
        stats = _proc_stats()
        return CpuSnap(tree_cpu(stats, server), tree_cpu(stats, standin), stats[os.getpid()][1], machine_busy())


async def background_load(seconds: float = 1.0) -> float:
    """Cores kept busy by other processes right now (nothing of ours is running yet)."""
    if not Path("/proc/stat").exists():
        return 0.0
    b0 = machine_busy()
    await asyncio.sleep(seconds)
    return (machine_busy() - b0) / seconds


async def quiet(max_wait: float) -> float:
    """Wait until other processes use under NOISY_CORES, or max_wait passes; the cores they used last."""
    deadline = time.monotonic() + max_wait
    while True:
        others = await background_load(0.5)
        if others <= NOISY_CORES or time.monotonic() > deadline:
            return others

