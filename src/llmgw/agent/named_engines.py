"""The engines this node runs on purpose: those part of llmgw and those agent.yaml names. Probed beside the
heartbeat, not in its way (a vLLM check imports vLLM: seconds of a core); only the first probe is waited for.

A named engine is probed again when its executable changes on disk (another file put at its path, or the file
rewritten: an operator's upgrade in place), seen by a stat each heartbeat, and otherwise every REPROBE_S, as
installed builds are rechecked (installs/installer.py), for what a stat cannot see (a library beside it replaced).
Each minute, as before, two nodes' probes of one vLLM (an import each) ran beside the two-rank replica they were
compiling, on the vLLM stage's two cores.
"""

from __future__ import annotations

import asyncio
import os

from llmgw.agent.installs.probe import probe_named
from llmgw.config.agent import AgentConfig
from llmgw.core.clock import Clock
from llmgw.wire.messages import EngineStatus

REPROBE_S = 600.0

Seen = tuple[int, int, int, int] | None  # a path's (device, inode, size, modification time in ns); None: absent


def _seen(path: str) -> Seen:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class NamedEngines:
    def __init__(self, cfg: AgentConfig, clock: Clock) -> None:
        self.cfg = cfg
        self.clock = clock
        self.statuses: list[EngineStatus] = []  # as last probed
        self._at = float("-inf")
        self._files: dict[str, Seen] = {}  # each named executable as it was when last probed
        self._task: asyncio.Task[None] | None = None

    def _now_seen(self) -> dict[str, Seen]:
        return {name: _seen(e.path) for name, e in sorted(self.cfg.engines.items())}

    async def refresh(self, first: bool) -> None:
        """Start a probe when one is due and none runs; wait for it when it is the `first`."""
        if self._task is not None:
            return
        files = self._now_seen()
        if self.clock.monotonic() - self._at < REPROBE_S and files == self._files:
            return
        self._at, self._files = self.clock.monotonic(), files
        self._task = asyncio.create_task(self._probe())
        if first:
            await self._task

    async def _probe(self) -> None:
        try:
            overrides = {k: v.path for k, v in self.cfg.engines.items()}
            self.statuses = await probe_named(overrides, self.cfg.probe_engines)
        finally:
            self._task = None

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
