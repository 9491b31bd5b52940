"""The engines this node runs on purpose: those part of llmgw and those agent.yaml names. Probed each minute beside
the heartbeat, not in its way (a vLLM check takes seconds); only the first probe is waited for."""

from __future__ import annotations

import asyncio

from llmgw.agent.installs.probe import probe_named
from llmgw.config.agent import AgentConfig
from llmgw.core.clock import Clock
from llmgw.wire.messages import EngineStatus

REPROBE_S = 60.0


class NamedEngines:
    def __init__(self, cfg: AgentConfig, clock: Clock) -> None:
        self.cfg = cfg
        self.clock = clock
        self.statuses: list[EngineStatus] = []  # as last probed
        self._at = float("-inf")
        self._task: asyncio.Task[None] | None = None

    async def refresh(self, first: bool) -> None:
        """Start a probe when one is due and none runs; wait for it when it is the `first`."""
        if self.clock.monotonic() - self._at < REPROBE_S or self._task is not None:
            return
        self._at = self.clock.monotonic()
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
