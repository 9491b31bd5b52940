"""One back-off for every retry in llmgw: `base`, doubling with each failure, never beyond `cap`."""

from __future__ import annotations


def doubling(base: float, cap: float, n: int) -> float:
    """The wait after the n-th retry (n = 0: the first wait is `base`)."""
    return min(cap, base * 2.0**n)
