"""A store read that requests ask for when what they check changed (API keys): one runs at a time however many ask,
each asker waits for it a short while at most, and none waits while reads fail. A store that is away answers only
after its pool's wait for a connection (10 s on PostgreSQL), far longer than a request may wait on it; meanwhile the
askers go on with what is known, and the read lands (the read keeps what it read) whenever the store answers. A read
that failed is tried again once RETRY_S has passed, however many ask meanwhile (a store failing at once, as SQLite
does, would otherwise be read on every request)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from llmgw.core.clock import Clock
from llmgw.core.errors import StoreError

log = logging.getLogger(__name__)

REREAD_WAIT_S = 1.0  # an answering store reads keys in milliseconds; a store this slow is treated as away
RETRY_S = 5.0  # after a failed read, the next begins no sooner: what is known serves meanwhile


class Reread:
    def __init__(self, read: Callable[[], Awaitable[None]], what: str, clock: Clock,
                 wait_s: float = REREAD_WAIT_S) -> None:
        self._read = read
        self._what = what  # for the log: "API keys"
        self._clock = clock
        self._wait_s = wait_s
        self._task: asyncio.Task[None] | None = None
        self._waited_out = False  # an asker gave up on the read in flight: the later ones do not wait for it
        self._failed_at = 0.0  # monotonic time the last read failed
        self.failing: str | None = None  # why the last read failed; None once one lands

    def start(self) -> None:
        """A read begun (in the background: nobody waits), unless one is in flight or the last failed less than
        RETRY_S ago."""
        if self._task is None and (self.failing is None or self._clock.monotonic() - self._failed_at >= RETRY_S):
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def ask(self) -> None:
        """A read begun (or the one in flight joined), waited for at most wait_s; not at all while reads fail or
        another asker has waited this one out."""
        self.start()
        task = self._task
        if task is None or self.failing is not None or self._waited_out:
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), self._wait_s)
        except TimeoutError:
            self._waited_out = True

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        try:
            await self._read()
        except StoreError as e:
            if self.failing is None:
                log.warning("%s changed and cannot be read now (those known are used meanwhile): %s", self._what, e)
            self.failing, self._failed_at = str(e), self._clock.monotonic()
        except Exception as e:  # not the store's trouble: logged, and read again as after a store's failure
            log.exception("%s could not be read", self._what)
            self.failing, self._failed_at = f"{type(e).__name__}: {e}", self._clock.monotonic()
        else:
            if self.failing is not None:
                log.warning("%s read again: the store answers", self._what)
            self.failing = None
        finally:
            self._task = None
            self._waited_out = False
