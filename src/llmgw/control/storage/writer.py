"""The one writer of the control plane's store: every write runs in order on one thread, never on the event loop,
so a store that waits delays persistence, not the API, the heartbeats or reconcile (the state is in memory).

`submit`: writes that must land eventually (retried in order, with backoff). `run`: a caller waits for the answer
and handles the failure itself.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from llmgw.core.clock import Clock
from llmgw.core.errors import Deposed, StoreError

log = logging.getLogger(__name__)
T = TypeVar("T")
BACKOFF_MAX = 5.0


def _settle(fut: Future[Any], result: Any = None, exc: BaseException | None = None) -> None:
    try:
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)
    except Exception:  # cancelled meanwhile, or the waiter's loop has closed: nobody is left to tell
        pass


class InlineWriter:
    """Writes in the caller's thread: for tools and tests that have no event loop to protect."""

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        try:
            fn(*args)
        except Deposed as e:  # as StoreWriter: a write this process may no longer make is refused, not raised
            log.warning("store write %s refused: %s", getattr(fn, "__name__", fn), e)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        return fn(*args)

    def pending(self) -> int:
        return 0

    def close(self, timeout: float = 10.0) -> None:
        pass


class StoreWriter:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock  # when an outage began (time.sleep only paces the retries)
        self._q: queue.Queue[tuple[Callable[..., Any], tuple[Any, ...], Future[Any] | None] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._work, name="store-writer", daemon=True)
        self._thread.start()
        self.failing_since: float | None = None  # monotonic time the current outage began

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        self._q.put((fn, args, None))

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        fut: Future[T] = Future()
        self._q.put((fn, args, fut))
        return await asyncio.wrap_future(fut)

    def pending(self) -> int:
        return self._q.qsize()

    def close(self, timeout: float = 10.0) -> None:
        """Write what is queued (for up to `timeout`), then stop."""
        self._q.put(None)
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.error("store writer: %d write(s) still queued at shutdown", self._q.qsize())

    def _work(self) -> None:
        while (item := self._q.get()) is not None:
            fn, args, fut = item
            if fut is not None:
                if not fut.set_running_or_notify_cancel():
                    continue  # its caller gave up waiting (cancelled): the write is not wanted any more
                try:
                    result = fn(*args)
                except BaseException as e:  # handed to the waiting caller, which decides
                    _settle(fut, exc=e)
                else:
                    _settle(fut, result=result)
                continue
            self._until_done(fn, args)

    def _until_done(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        delay = 0.05
        while True:
            try:
                fn(*args)
            except StoreError as e:
                if self.failing_since is None:
                    self.failing_since = self.clock.monotonic()
                    log.error("store write failing (%s); retrying in order until it lands", e)
                time.sleep(delay)
                delay = min(BACKOFF_MAX, delay * 2)
                continue
            except Deposed as e:  # this process no longer leads: the write is not its to make (it steps down)
                log.warning("store write %s refused: %s", getattr(fn, "__name__", fn), e)
            except Exception:  # not the store's trouble but the write's: keeping it would block every later one
                log.exception("store write %s dropped", getattr(fn, "__name__", fn))
            if self.failing_since is not None:
                log.warning("store writes land again after %.1fs", self.clock.monotonic() - self.failing_since)
                self.failing_since = None
            return
