"""The store as the control plane's owners reach it: reads off the event loop, writes through the one writer,
events; and for how long either has been failing (the health answer and the routers' stale bound read it)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from llmgw.control.storage.writer import InlineWriter, StoreWriter
from llmgw.core.clock import Clock
from llmgw.core.errors import StoreError
from llmgw.records.state import Event
from llmgw.store.base import Store

log = logging.getLogger(__name__)
T = TypeVar("T")


class Storage:
    def __init__(self, store: Store, writer: InlineWriter | StoreWriter, clock: Clock, shared: bool) -> None:
        self.store = store
        self.writer = writer  # the server passes a StoreWriter: no write on the event loop
        self.clock = clock
        self.shared = shared  # other servers may write the store: follow what they write
        self._reads_failing_since: float | None = None  # monotonic time store reads began to fail

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        """A store read off the event loop. Not through the writer: a read must not wait behind a failing write.
        Whether reads fail is kept, beside the writer's account of writes (failing_for)."""
        try:
            got = await asyncio.to_thread(fn, *args)
        except StoreError:
            if self._reads_failing_since is None:
                self._reads_failing_since = self.clock.monotonic()
            raise
        self._reads_failing_since = None
        return got

    def event(self, kind: str, subject: str, message: str) -> None:
        log.info("%s", message)
        event = Event(at=self.clock.now(), kind=kind, subject=subject, message=message)
        self.writer.submit(self.store.add_event, event)

    def failing_for(self) -> float:
        """Seconds since the store began failing writes (the writer says when) or reads; 0 while they work."""
        starts = [t for t in (getattr(self.writer, "failing_since", None), self._reads_failing_since) if t is not None]
        return 0.0 if not starts else max(0.0, self.clock.monotonic() - min(starts))

    def stale_for(self) -> float:
        """Seconds this server's view of replicas has gone unconfirmed: reads of the shared store failing (writes
        failing while reads work confirm it all the same; alone on its store, a server's memory is the truth)."""
        since = self._reads_failing_since
        return max(0.0, self.clock.monotonic() - since) if self.shared and since is not None else 0.0
