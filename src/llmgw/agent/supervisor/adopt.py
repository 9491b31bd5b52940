"""Engines a previous agent left running, adopted by the next instead of restarted. Each shard leaves beside its
log a pid file and its spec (0600: it holds the secret); a new agent takes over a process that still leads its own
session (pids get reused) when the control plane asks for exactly that shard again, and stops the rest."""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from llmgw.wire.messages import ShardSpec

SPEC_SUFFIX = ".shard"


@dataclass(frozen=True)
class Running:
    pid: int
    spec: ShardSpec
    pid_path: Path
    engine_port: int = 0  # the loopback port its HTTP server binds behind the gate (0: none recorded)


class AdoptedProcess:
    """What the supervisor needs of a process it did not start: its pid, whether it still runs, waiting for it."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.who = identity(pid)
        self._code: int | None = None

    @property
    def returncode(self) -> int | None:
        """None while it runs; then -1 (not our child: its exit code went to whoever reaped it)."""
        if self._code is None and not (leads_its_session(self.pid) and identity(self.pid) == self.who):
            self._code = -1
        return self._code

    async def wait(self) -> int:
        while self.returncode is None:
            await asyncio.sleep(0.1)
        return -1


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "?"


def identity(pid: int) -> str:
    """Who a pid is: this boot and the process's start time (clock ticks since boot). A pid file outlives a
    reboot, and pids are reused: the number alone could name an unrelated service, which we would then kill."""
    try:
        start = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""
    return f"{_boot_id()}/{start}"


def leads_its_session(pid: int) -> bool:
    try:
        if os.getsid(pid) != pid:
            return False
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (ProcessLookupError, OSError):
        return False
    return state != "Z"


def find_running(state_dir: Path) -> dict[tuple[str, int], Running]:
    """Shards a previous agent left running, by (replica, rank). Stale files of dead ones are removed; a live
    process without a readable spec cannot be adopted and is stopped; a pid that now names another process is
    left alone."""
    found: dict[tuple[str, int], Running] = {}
    for pid_path in sorted(state_dir.glob("*.pid")):
        spec_path = pid_path.with_suffix(SPEC_SUFFIX)
        try:
            number, who, *rest = [*pid_path.read_text().split(), ""]
            pid, port = int(number), int(rest[0] or 0)
        except (OSError, ValueError):
            pid, who, port = 0, "", 0
        # ours only if it is the very process we started: same boot, same start time, still its own session
        alive = pid > 0 and bool(who) and identity(pid) == who and leads_its_session(pid)
        spec = None
        if alive:
            try:
                spec = ShardSpec.model_validate_json(spec_path.read_bytes())
            except (OSError, ValidationError):
                stop_group(pid)
        if alive and spec is not None:
            found[(spec.replica_id, spec.rank)] = Running(pid, spec, pid_path, port)
        else:
            pid_path.unlink(missing_ok=True)
            spec_path.unlink(missing_ok=True)
    return found


def stop_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def discard(run: Running) -> None:
    """Stop a shard nobody asks for any more, and forget it."""
    stop_group(run.pid)
    run.pid_path.unlink(missing_ok=True)
    run.pid_path.with_suffix(SPEC_SUFFIX).unlink(missing_ok=True)
