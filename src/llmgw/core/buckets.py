"""Token buckets per key: what one party (a node, say) can make the control plane do per second is bounded."""

from __future__ import annotations

from llmgw.core.clock import Clock


class Buckets:
    """Each key starts with `burst` tokens and earns `per_second` more, up to `burst`; `take` spends one."""

    def __init__(self, clock: Clock, per_second: float, burst: float) -> None:
        self.clock = clock
        self.rate = per_second
        self.burst = burst
        self.level: dict[str, tuple[float, float]] = {}  # key -> (tokens, at)

    def take(self, key: str) -> bool:
        now = self.clock.monotonic()
        tokens, at = self.level.get(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.rate)
        if tokens < 1.0:
            self.level[key] = (tokens, now)
            return False
        self.level[key] = (tokens - 1.0, now)
        return True
