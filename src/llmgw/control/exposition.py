"""The Prometheus text format (0.0.4), written for llmgw's own collectors at the cost a 1,000-node scrape allows.

`render(reg)` writes byte for byte what prometheus_client's `generate_latest(reg)` writes (a test compares them),
but checks names once per family rather than once per sample's label; a name that is not a plain Prometheus name is
refused (no llmgw family has one).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import cast

from prometheus_client import utils
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


def render(registry: Collector) -> bytes:
    out: list[str] = []
    escaped: dict[str, str] = {}  # label values repeat across families (node, model, replica names)
    # and so do values (1 for every condition, 0, 7 NVLink peers...); keyed with the sign too: -0.0 == 0.0
    numbers: dict[tuple[float, float], str] = {}
    for metric in registry.collect():
        mtype = TYPES.get(metric.type)
        if mtype is None:
            raise ValueError(f"{metric.name}: metric type {metric.type} is not one llmgw writes")
        name = metric.name + "_total" if metric.type == "counter" else metric.name
        if not NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a Prometheus metric name")
        out.append(f"# HELP {name} {_doc(metric.documentation)}\n# TYPE {name} {mtype}\n")
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
            key = (s.value, math.copysign(1.0, s.value))
            value = numbers.get(key)
            if value is None:
                value = numbers[key] = go_float(s.value)
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
            parts = []
            for k in order:
                v = labels[k]
                e = escaped.get(v)
                if e is None:
                    e = escaped[v] = _value(v)
                parts.append(f'{k}="{e}"')
            out.append(f"{s.name}{{{','.join(parts)}}} {value}\n")
    return "".join(out).encode()
