"""Which processes hold memory on which GPU, now: NVML's per-process accounting, or `nvidia-smi
--query-compute-apps` where NVML cannot be loaded. Read after an engine says it is ready (a GPU build must hold
memory on every GPU it was given, and on no other) and after it says it sleeps (it must have let go): an engine's
own word is not taken for either.

Every figure read here is bounded and checked: a line that does not parse is a problem said in nvidia-smi's words,
never a zero that would pass for "holds nothing".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol, cast

import pynvml  # type: ignore[import-untyped]

from llmgw.agent.discovery.commands import CommandResult, CommandRunner

MiB = 1 << 20
QUERY = ["nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits"]
# a GPU build that runs on its card holds at least a CUDA context there (a few hundred MiB); less is not running on it
HELD_MIN_BYTES = 64 * MiB
STANDIN = "compute-apps.csv"  # beside a simulated node's inventory: what QUERY would print there
_LINES = 4096  # processes on one node's GPUs: more is not an answer
_PID_MAX = 1 << 22  # Linux's pid_max ceiling
_USED_MAX_MIB = 1 << 24  # 16 TiB: past any card


@dataclass(frozen=True)
class Use:
    pid: int
    gpu_uuid: str
    used_bytes: int | None  # None: the driver does not account it per process ("[N/A]": some MIG setups, WDDM)


@dataclass(frozen=True)
class Reading:
    """What was read: every process holding GPU memory, or why nothing could be read (`problem`)."""

    uses: tuple[Use, ...] = ()
    problem: str = ""
    source: str = ""  # "nvml", "nvidia-smi"; "" when neither could be read


def _problem(words: str) -> Reading:
    return Reading(problem=words[:500])


def read_smi(run: CommandRunner) -> Reading:
    result = run(QUERY)
    if result is None:
        return _problem("nvidia-smi is not installed")
    if result.returncode != 0:
        said = (result.stderr.strip() or result.stdout.strip() or "no word").splitlines()[0]
        return _problem(f"nvidia-smi --query-compute-apps exited {result.returncode}: {said[:300]}")
    uses = []
    lines = [ln for ln in result.stdout.splitlines() if ln.strip()]
    if len(lines) > _LINES:
        return _problem(f"nvidia-smi --query-compute-apps listed {len(lines)} processes: more than any node runs")
    for line in lines:
        if line.strip().lower().startswith("no running processes"):
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3 or not parts[0].isdigit() or not 0 < int(parts[0]) <= _PID_MAX or not parts[1]:
            return _problem(f"nvidia-smi --query-compute-apps: cannot read {line.strip()[:200]!r}")
        used: int | None
        if parts[2].startswith("[") or parts[2].upper() == "N/A":  # [N/A], [Not Supported]
            used = None
        elif parts[2].isdigit() and int(parts[2]) <= _USED_MAX_MIB:
            used = int(parts[2]) * MiB
        else:
            return _problem(f"nvidia-smi --query-compute-apps: cannot read {line.strip()[:200]!r}")
        uses.append(Use(pid=int(parts[0]), gpu_uuid=parts[1][:128], used_bytes=used))
    return Reading(uses=tuple(uses), source="nvidia-smi")


class NvmlProcesses(Protocol):
    """The part of pynvml read here (the module satisfies it; tests pass a fake)."""

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> Any: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> Any: ...
    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> Any: ...


def read_nvml(nvml: NvmlProcesses) -> Reading:
    """Per-process accounting from NVML; any NVML error is the reading's problem, in NVML's words."""
    try:
        nvml.nvmlInit()
    except Exception as e:  # pynvml's NVMLError, or the library missing
        return _problem(f"NVML: {e}")
    try:
        uses = []
        for i in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            raw = nvml.nvmlDeviceGetUUID(handle)
            uuid = (raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw))[:128]
            for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle) or []:
                used = getattr(p, "usedGpuMemory", None)
                ok = isinstance(used, int) and 0 <= used <= _USED_MAX_MIB * MiB
                uses.append(Use(pid=int(p.pid), gpu_uuid=uuid, used_bytes=used if ok else None))
                if len(uses) > _LINES:
                    return _problem("NVML listed more processes than any node runs")
        return Reading(uses=tuple(uses), source="nvml")
    except Exception as e:
        return _problem(f"NVML: {e}")
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def read_standin(path: Path) -> Reading:
    """A simulated node's stand-in for the driver's accounting: nvidia-smi's query output kept in a file beside the
    inventory (what the GPUs hold is whatever the test says). No file: nothing to read, nothing claimed."""
    try:
        with path.open("rb") as f:
            text = f.read(1 << 20).decode(errors="replace")
    except OSError as e:
        return _problem(f"{path.name}: {e.strerror or e}")
    return replace(read_smi(lambda argv: CommandResult(0, text)), source=f"stand-in {path.name}")


def reader(nvml: NvmlProcesses | None, run: CommandRunner, inventory: Path | None) -> Callable[[], Reading]:
    """NVML first (it knows the same as nvidia-smi, without a process per read), nvidia-smi where it cannot. A node
    whose GPUs come from an inventory reads the stand-in beside it, never this machine's driver: its cards are not
    these."""

    def read() -> Reading:
        if inventory is not None:
            return read_standin(inventory.parent / STANDIN)
        if nvml is not None:
            got = read_nvml(nvml)
            if not got.problem:
                return got
        return read_smi(run)

    return read


def nvml_module() -> NvmlProcesses:
    return cast(NvmlProcesses, pynvml)


@dataclass(frozen=True)
class Given:
    index: int
    uuid: str


def _held(uuids: set[str], pids: set[int], reading: Reading) -> dict[str, int] | None:
    """Bytes held per GPU by these processes (by anything on these GPUs where none of them is listed: another PID
    namespace); None where the driver does not account it per process."""
    counted = [u for u in reading.uses if u.pid in pids] or [u for u in reading.uses if u.gpu_uuid in uuids]
    if any(u.used_bytes is None for u in counted):
        return None
    held: dict[str, int] = {}
    for u in counted:
        held[u.gpu_uuid] = held.get(u.gpu_uuid, 0) + (u.used_bytes or 0)
    return held


def held_on(given: Iterable[Given], pids: set[int], reading: Reading) -> int | None:
    """What these processes hold on the GPUs given, in bytes (None: not accounted per process here)."""
    uuids = {g.uuid for g in given}
    held = _held(uuids, pids, reading)
    return None if held is None else sum(b for uuid, b in held.items() if uuid in uuids)


def unproven(given: Iterable[Given], pids: set[int], reading: Reading) -> str:
    """Why a shard given these GPUs, running as these processes, does not run on exactly them ("" when it does, or
    when the driver accounts no process's memory): the GPUs it holds nothing on, and any it holds memory on that it
    was not given, each with its figure. Where none of its processes is listed at all (an agent in a container with
    its own process numbers sees the driver's as strangers), a GPU given to it counts as used when anything holds
    memory on it: placement gives a GPU to one shard, so that is its engine."""
    cards = list(given)
    uuids = {g.uuid for g in cards}
    mine = [u for u in reading.uses if u.pid in pids]
    held = _held(uuids, pids, reading)
    if held is None:
        return ""  # not accounted per process here: no proof either way
    empty = [g for g in cards if held.get(g.uuid, 0) < HELD_MIN_BYTES]
    stray = sorted(uuid for uuid, b in held.items() if mine and uuid not in uuids and b >= HELD_MIN_BYTES)
    words = []
    if empty:
        names = ", ".join(f"GPU {g.index} ({held.get(g.uuid, 0) // MiB} MiB)" for g in empty)
        words.append(f"its processes hold no memory on {names} of the {len(cards)} it was given")
    if stray:
        words.append(f"they hold memory on GPU(s) it was not given: {', '.join(stray)}")
    return "; ".join(words)
