"""Whether a reconcile pass is worth running before the next interval: a load asked for, a node heard from for the
first time, a shard's state reported changed (a cold start waits on each), a hub model resolved, this server
beginning to lead. Several owners ask for one with kick(); the reconcile loop takes it (take, wait)."""

from __future__ import annotations

import asyncio


class Kick:
    def __init__(self) -> None:
        self._wanted = asyncio.Event()

    def kick(self) -> None:
        """A pass is worth running now, not at the next interval."""
        self._wanted.set()

    def take(self) -> bool:
        """Whether a pass was asked for since the last time this was asked (the reconcile loop's question)."""
        kicked = self._wanted.is_set()
        self._wanted.clear()
        return kicked

    async def wait(self) -> None:
        """Until a pass is asked for (the loop bounds it by its interval)."""
        await self._wanted.wait()
