"""An engine's own gauges, read from its Prometheus text, under the names every engine shares (EngineLoad). Each
adapter declares which of its metrics they are (a `Gauges`). Pure, and the text is hostile: only the declared
lines are parsed, a value that is not a number is no reading, every reading is clamped to what the wire allows."""

from __future__ import annotations

import math
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from llmgw.wire.messages import EngineLoad

COUNT_MAX = 1e9  # the wire's bound on running and waiting
# more lines of the declared metrics than any engine writes (vLLM: one per data-parallel engine and model): a page
# with more is not an engine's, and parsing it all would cost the agent's loop
LINES_MAX = 4096
# a line of a gauge is a name, a few labels and a number: one longer is not an engine's, and the parser's cost grows
# with the square of a line's labels and escapes (a 1 MiB line of 100,000 labels held the agent's loop for 9 s)
LINE_MAX = 2048


@dataclass(frozen=True)
class Gauges:
    """The engine's metric names for each neutral gauge. Where a gauge has several names (an engine renamed it), the
    first one present is read and the others ignored: a build in transition exports both, and they are one gauge."""

    running: tuple[str, ...] = ()
    waiting: tuple[str, ...] = ()
    kv_cache_usage: tuple[str, ...] = ()  # a fraction 0..1 of the KV cache in use

    def names(self) -> frozenset[str]:
        return frozenset(self.running + self.waiting + self.kv_cache_usage)


def read_load(text: str, gauges: Gauges, at: float) -> EngineLoad | None:
    """The gauges in `text` (Prometheus text exposition), read at `at`. None when the text holds none of them, or a
    line of one of them is not Prometheus text: a page that is not the engine's metrics says nothing about its load.

    Samples of one metric are combined across their label sets (vLLM labels by model_name and engine, one set per
    data-parallel engine): running and waiting are summed; the KV cache fraction is averaged, each engine holding a
    cache of its own of one size. A gauge absent from the text is None (not zero). A non-finite value makes its gauge
    None; a finite one is clamped into its range (counts to [0, 1e9], the KV fraction to [0, 1]).
    """
    samples = _samples(text, gauges.names())
    if samples is None or not samples:
        return None
    return EngineLoad(
        running=_combined(samples, gauges.running, COUNT_MAX, mean=False),
        waiting=_combined(samples, gauges.waiting, COUNT_MAX, mean=False),
        kv_cache_usage=_combined(samples, gauges.kv_cache_usage, 1.0, mean=True),
        at=max(at, 0.0),
    )


def _samples(text: str, wanted: frozenset[str]) -> dict[str, list[float]] | None:
    """Every value of the wanted metrics, by name; None when one of their lines does not parse."""
    lines = [ln for ln in text.splitlines() if _metric_name(ln) in wanted]
    if not lines:
        return {}
    if len(lines) > LINES_MAX or any(len(ln) > LINE_MAX for ln in lines):
        return None
    out: dict[str, list[float]] = {}
    try:
        for family in text_string_to_metric_families("\n".join(lines) + "\n"):
            for s in family.samples:
                if s.name in wanted:
                    out.setdefault(s.name, []).append(float(s.value))
    # the parser's ways of saying "not Prometheus text", and a number too large for a float (an integer of 400 digits)
    except (ValueError, TypeError, IndexError, KeyError, ArithmeticError):
        return None
    return out


def _metric_name(line: str) -> str:
    """The name a sample line starts with ("" for comments and blank lines): up to its labels or its value."""
    if line.startswith("#"):
        return ""
    end = len(line)
    for stop in ("{", " ", "\t"):
        i = line.find(stop, 0, end)
        if i >= 0:
            end = i
    return line[:end]


def _combined(samples: dict[str, list[float]], names: tuple[str, ...], cap: float, mean: bool) -> float | None:
    for name in names:
        values = samples.get(name)
        if not values:
            continue
        if not all(math.isfinite(v) for v in values):
            return None
        clamped = [min(max(v, 0.0), cap) for v in values]  # each first, so a sum of huge values stays finite
        total = sum(clamped) / len(clamped) if mean else sum(clamped)
        return min(total, cap)
    return None
