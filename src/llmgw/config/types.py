"""Value types shared by the config files: durations, byte sizes, listen addresses."""

from __future__ import annotations

import os
import re
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, ValidationInfo

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?)?B?\s*$", re.IGNORECASE)
_SIZE_UNITS = {
    "": 1,
    "k": 1000,
    "m": 1000**2,
    "g": 1000**3,
    "t": 1000**4,
    "ki": 1024,
    "mi": 1024**2,
    "gi": 1024**3,
    "ti": 1024**4,
}


def parse_duration(v: object) -> float:
    if isinstance(v, bool):
        raise ValueError("must be a duration like 30s, 10m or 1h")
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        m = _DURATION.match(v)
        if m:
            return float(m.group(1)) * _UNITS[m.group(2)]
    raise ValueError(f"{v!r} is not a duration like 30s, 10m or 1h")


def parse_size(v: object) -> int:
    if isinstance(v, bool):
        raise ValueError("must be a size like 512Mi or 80G")
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        m = _SIZE.match(v)
        if m:
            return int(float(m.group(1)) * _SIZE_UNITS[(m.group(2) or "").lower()])
    raise ValueError(f"{v!r} is not a size like 512Mi or 80G")


def parse_listen(v: object) -> str:
    if not isinstance(v, str) or ":" not in v:
        raise ValueError(f"{v!r} is not host:port")
    host, _, port = v.rpartition(":")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{v!r}: port must be a number 0-65535")
    return f"{host or '0.0.0.0'}:{port}"


Duration = Annotated[float, BeforeValidator(parse_duration)]

# how often an agent reports: what the control plane may set, and what an agent takes from it
HEARTBEAT_MIN_S, HEARTBEAT_MAX_S = 0.1, 60.0


def within(lo: float, hi: float = float("inf")) -> AfterValidator:
    """A duration within [lo, hi], as `Annotated[Duration, within(lo, hi)]`: an interval a loop sleeps or divides
    by (0 stops the process, or spins it)."""

    def check(v: float) -> float:
        if not v >= lo:  # NaN too
            raise ValueError(f"must be at least {lo:g}s")
        if v > hi:
            raise ValueError(f"must be at most {hi:g}s")
        return v

    return AfterValidator(check)


def heartbeat_within(v: float) -> float:
    """An interval a control plane sent, clamped to what an agent will heartbeat at (garbage: the default)."""
    if v != v:
        return 3.0
    return min(max(v, HEARTBEAT_MIN_S), HEARTBEAT_MAX_S)
ByteSize = Annotated[int, BeforeValidator(parse_size)]
Listen = Annotated[str, BeforeValidator(parse_listen)]


def split_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    return host.strip("[]"), int(port)


def _resolve_path(v: str, info: ValidationInfo) -> str:
    """Relative paths in a config file are relative to the file, not to wherever the process started."""
    base = (info.context or {}).get("base_dir") if info.context else None
    if base and v and not os.path.isabs(v):
        return os.path.normpath(os.path.join(base, v))
    return v


ConfigPath = Annotated[str, AfterValidator(_resolve_path)]
