"""The Prometheus text format (0.0.4), written for llmgw's own collectors at the cost a 1,000-node scrape allows.

`render(reg)` writes byte for byte what prometheus_client's `generate_latest(reg)` writes (a test compares them),
but checks names once per family rather than once per sample's label; a name that is not a plain Prometheus name is
refused (no llmgw family has one). `header` and `samples` write a family's parts apart, so that the samples of one
node or replica can be written once and kept (control/views/metrics.py).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from typing import cast

from prometheus_client import utils
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

go_float = cast(Callable[[float], str], utils.floatToGoString)  # the library's own number format (untyped there)

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")  # used with fullmatch: "$" would let a final newline through
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
TYPES = {"counter": "counter", "gauge": "gauge", "histogram": "histogram", "summary": "summary",
         "unknown": "untyped"}


def _value(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _doc(d: str) -> str:
    return d.replace("\\", r"\\").replace("\n", r"\n")


class Formats:
    """Label values and numbers already written in this scrape: they repeat across families (node, model and
    replica names; 1 for every condition, 0, 7 NVLink peers...)."""

    def __init__(self) -> None:
        self.escaped: dict[str, str] = {}
        self.numbers: dict[tuple[float, float], str] = {}  # keyed with the sign too: -0.0 == 0.0

    def number(self, v: float) -> str:
        key = (v, math.copysign(1.0, v))
        out = self.numbers.get(key)
        if out is None:
            out = self.numbers[key] = go_float(v)
        return out

    def label(self, v: str) -> str:
        out = self.escaped.get(v)
        if out is None:
            out = self.escaped[v] = _value(v)
        return out


def header(metric: Metric) -> str:
    """A family's HELP and TYPE lines; a type or name not written here is refused."""
    mtype = TYPES.get(metric.type)
    if mtype is None:
        raise ValueError(f"{metric.name}: metric type {metric.type} is not one llmgw writes")
    name = metric.name + "_total" if metric.type == "counter" else metric.name
    if not NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not a Prometheus metric name")
    return f"# HELP {name} {_doc(metric.documentation)}\n# TYPE {name} {mtype}\n"


def samples(metric: Metric, formats: Formats | None = None) -> str:
    """A family's sample lines, as the library writes them."""
    f = formats or Formats()
    out: list[str] = []
    orders: dict[tuple[str, ...], tuple[str, ...]] = {}  # a sample's label names, in the order written
    names: set[str] = set()
    for s in metric.samples:
        if s.name not in names:
            if s.name.endswith(("_created", "_gsum", "_gcount")) or not NAME.fullmatch(s.name):
                raise ValueError(f"{s.name!r}: not a metric name written here")
            names.add(s.name)
        if s.timestamp is not None:
            raise ValueError(f"{s.name}: timestamps are not written here")
        labels = s.labels
        value = f.number(s.value)
        if not labels:
            out.append(f"{s.name} {value}\n")
            continue
        keys = tuple(labels)
        order = orders.get(keys)
        if order is None:
            bad = [k for k in keys if not LABEL.fullmatch(k)]
            if bad:
                raise ValueError(f"{bad[0]!r} is not a Prometheus label name")
            order = orders[keys] = tuple(sorted(keys))
        parts = ",".join(f'{k}="{f.label(labels[k])}"' for k in order)
        out.append(f"{s.name}{{{parts}}} {value}\n")
    return "".join(out)


def text(metrics: Iterable[Metric], formats: Formats | None = None) -> str:
    f = formats or Formats()
    return "".join(header(m) + samples(m, f) for m in metrics)


def render(registry: Collector) -> bytes:
    return text(registry.collect()).encode()
