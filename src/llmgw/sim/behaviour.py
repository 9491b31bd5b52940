"""What the sim engine models of a real engine's serving, so routing has something real to act on: a prefix
cache, prefill time for what the cache does not hold, a concurrency limit, and faults (Behaviour's fields).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Literal

from llmgw.sim.sleep import SleepMode

BLOCK_CHARS = 64  # about 16 tokens: vLLM's default KV block
Fault = Literal["", "hang", "slow", "error"]


@dataclass(frozen=True)
class Behaviour:
    # time to first token: the prompt's uncached tokens over this (0: instant), as a real engine's prefill
    prefill_tokens_per_second: float = 0.0
    # prefix cache: an LRU of this many blocks of BLOCK_CHARS, each keyed by the whole prefix up to it (0: none)
    cache_blocks: int = 0
    max_running: int = 0  # requests generating at once (0: no limit); the rest wait in order, and the gauges say so
    fault: Fault = ""  # hang: accept and never answer; slow: ten times as long; error: answer 503
    load_seconds: float = 0.0  # the model "loads" this long after the server starts: every path answers 503 meanwhile
    sleep: SleepMode = field(default_factory=SleepMode)  # vLLM's sleep mode (sim/sleep.py): off unless enabled


class PrefixCache:
    def __init__(self, blocks: int) -> None:
        self.capacity = blocks
        self._keys: OrderedDict[bytes, None] = OrderedDict()

    def admit(self, text: str) -> float:
        """The share (0..1) of `text` already cached; then all of it is (the least recently used goes first)."""
        if self.capacity <= 0 or len(text) < BLOCK_CHARS:
            return 0.0
        prev, hit, keys = b"", 0, []
        for i in range(0, len(text) - BLOCK_CHARS + 1, BLOCK_CHARS):
            prev = hashlib.blake2b(prev + text[i:i + BLOCK_CHARS].encode("utf-8", "surrogatepass"),
                                   digest_size=8).digest()
            keys.append(prev)
        for k in keys:
            if k not in self._keys:
                break
            hit += 1
        for k in keys:
            self._keys[k] = None
            self._keys.move_to_end(k)
        while len(self._keys) > self.capacity:
            self._keys.popitem(last=False)
        return hit * BLOCK_CHARS / len(text)

    @property
    def usage(self) -> float:
        return len(self._keys) / self.capacity if self.capacity > 0 else 0.0


class Slots:
    """At most `limit` at once (0: any number); the rest wait in arrival order."""

    def __init__(self, limit: int) -> None:
        self._sem = asyncio.Semaphore(limit) if limit > 0 else None
        self.running = 0
        self.waiting = 0

    async def __aenter__(self) -> None:
        if self._sem is not None:
            self.waiting += 1
            try:
                await self._sem.acquire()
            finally:
                self.waiting -= 1
        self.running += 1

    async def __aexit__(self, *exc: object) -> None:
        self.running -= 1
        if self._sem is not None:
            self._sem.release()


def prefill_seconds(b: Behaviour, prompt_tokens: int, cached_share: float) -> float:
    if b.prefill_tokens_per_second <= 0:
        return 0.0
    seconds = prompt_tokens * (1.0 - cached_share) / b.prefill_tokens_per_second
    return seconds * (10 if b.fault == "slow" else 1)
