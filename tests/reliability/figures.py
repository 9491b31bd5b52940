"""Figures the reliability checks measure, appended to test-artifacts/reliability-figures.txt for docs/reliability.md
(measured, never asserted beyond the check's own bounds)."""

from __future__ import annotations

import time
from pathlib import Path

OUT = Path(__file__).resolve().parents[2] / "test-artifacts" / "reliability-figures.txt"


def record(what: str, value: float, conditions: str) -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("a") as f:
        f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')}\t{what}\t{value:.2f}\t{conditions}\n")
