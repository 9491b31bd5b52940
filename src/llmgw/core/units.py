"""Sizes and rates in the words people read."""

from __future__ import annotations


def mb(n: float) -> str:
    """A byte count, rounded to what a person reads: "3 MB", "1.2 GB"."""
    if n >= 1e12:
        return f"{n / 1e12:.1f} TB"
    if n >= 1e9:
        return f"{n / 1e9:.1f} GB"
    if n >= 1e6:
        return f"{n / 1e6:.0f} MB"
    return f"{n / 1e3:.0f} kB" if n >= 1e3 else f"{n:.0f} bytes"
