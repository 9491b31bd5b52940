"""What the node reads of itself for its report: its hardware, the weights it holds and the directories they are
in, and which builds its engines run from (their command lines in /proc). Blocking: run in a thread."""

from __future__ import annotations

import os
import platform
from collections.abc import Iterable
from pathlib import Path

from llmgw.agent.discovery import HostRoot, discover
from llmgw.agent.weights import hubdir, local
from llmgw.config.agent import AgentConfig
from llmgw.wire.messages import Hardware, WeightsDir


def read_hardware(cfg: AgentConfig) -> Hardware:
    return discover(
        HostRoot(Path(cfg.host_root)),
        inventory=Path(cfg.gpu_inventory) if cfg.gpu_inventory else None,
        weights_dir=Path(cfg.weights_dir),
        default_arch=platform.machine(),
    )


def observe_weights(cfg: AgentConfig) -> tuple[list[str], list[WeightsDir]]:
    """What this node holds, and the directories it looks in with the file systems under them (its own last)."""
    own = Path(cfg.weights_dir)
    dirs = [Path(d) for d in (*cfg.weights_dirs, cfg.weights_dir)]
    mountinfo = ""
    # the host root's (a test's or a simulated node's), else this process's own: the files are real either way
    for table in (Path(cfg.host_root) / "proc/self/mountinfo", Path("/proc/self/mountinfo")):
        try:
            mountinfo = table.read_text()
            break
        except OSError:
            continue
    described = []
    for d in dirs[:64]:
        mine = d == own
        described.append(local.describe_dir(d, mountinfo, cfg.weights_budget if mine else None,
                                            local.managed_bytes(d) if mine else 0))
    # whole hub directories by their pinned source first: a report cut to its bound never drops them
    return (hubdir.held_sources(dirs) + local.visible(dirs))[:1024], described


def command_line_paths(pids: Iterable[int]) -> set[Path]:
    """Every absolute path the processes' command lines name (an exited one names nothing)."""
    out: set[Path] = set()
    for pid in pids:
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        out |= {Path(os.fsdecode(a)) for a in args if a.startswith(b"/")}
    return out
