"""Time is injected. Logic asks a Clock; only SystemClock touches the wall clock."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import ClassVar, Protocol

# How fast SystemClock.now() may close a gap with the wall clock: a step of the wall clock (set by hand, a VM
# resumed, NTP stepping) is followed at 1% of the time elapsed, so every duration llmgw measures between two of its
# own timestamps (a node's silence, a replica's idleness, a scaling period) is off by at most 1%, and an hour's step
# is caught up in 100 hours. Slewing by NTP moves both clocks alike and opens no gap.
SLEW = 0.01


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...

    def monotonic(self) -> float: ...


class SystemClock:
    """now(): seconds since the epoch, moving with the monotonic clock and never backwards; it follows the wall
    clock, but a step of the wall clock only at the rate SLEW (timers compare its readings: a jump must not make
    every node look silent for an hour, or every replica idle). Instances of one process agree."""

    _lock = threading.Lock()
    # (monotonic, now) at the last reading, shared by the clocks of the process
    _process: ClassVar[list[tuple[float, float]]] = []

    def __init__(self, wall: Callable[[], float] = time.time, mono: Callable[[], float] = time.monotonic,
                 shared: bool = True) -> None:
        self._wall = wall
        self._mono = mono
        self._last = SystemClock._process if shared else []  # a clock of its own: tests give it their time sources

    def now(self) -> float:
        with self._lock:
            mono, wall = self._mono(), self._wall()
            now = wall
            if self._last:
                then, said = self._last[0]
                dt = max(0.0, mono - then)
                room = SLEW * dt
                now = said + dt + max(-room, min(room, wall - said - dt))
            self._last[:] = [(mono, now)]
            return now

    def monotonic(self) -> float:
        return self._mono()


class FakeClock:
    """A clock that moves only when told to; used by tests and by pure-logic callers."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start
        self._mono = 0.0

    def now(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        self._now += seconds
        self._mono += seconds
