"""A scrape's text: what `render(registry(...))` writes, byte for byte (a test compares them), with each node's and
each replica's samples written once per line and kept.

A line is kept per record (NodeFacts for a node, ReplicaLines for a replica), so a node's samples are written again
only when its record changes, not at every scrape: at 10,000 nodes they are most of the text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from prometheus_client.core import GaugeMetricFamily
from pydantic import BaseModel

from llmgw.control.nodes.ready_times import ready_family
from llmgw.control.views.exposition import Formats, header, samples, text
from llmgw.control.views.metrics import (
    Gauges,
    ReplicaCounts,
    adapter_family,
    cluster_families,
    model_lines,
    node_families,
    node_samples,
    own_gauges,
    replica_counts,
    replica_events,
    replica_families,
    replica_samples,
    requests_families,
    unresolved,
)
from llmgw.control.views.summary import NodeLine, ReplicaLine, Summary

L = TypeVar("L", bound=BaseModel)


class Kept(Generic[L]):
    """Per line (by its key): the line and its samples per family, written again only for a line not seen before."""

    def __init__(self, families: Callable[[], tuple[GaugeMetricFamily, ...]],
                 add: Callable[[tuple[GaugeMetricFamily, ...], L], None], key: Callable[[L], str]) -> None:
        self.families = families
        self.add: Callable[[tuple[GaugeMetricFamily, ...], L], None] = add
        self.key: Callable[[L], str] = key
        self.heads = tuple(header(f).encode() for f in families())
        self.held: dict[str, tuple[L, tuple[bytes, ...]]] = {}

    def written(self, line: L) -> tuple[bytes, ...]:
        fams = self.families()
        self.add(fams, line)
        return tuple(samples(f).encode() for f in fams)

    def text(self, lines: Iterable[L]) -> bytes:
        """Every family's head and its samples, the lines in the order given; lines not given are forgotten."""
        held, self.held = self.held, {}
        parts = []
        for line in lines:
            k = self.key(line)
            h = held.get(k)
            if h is None or h[0] is not line:
                h = (line, self.written(line))
            self.held[k] = h
            parts.append(h[1])
        return b"".join([head + b"".join([p[i] for p in parts]) for i, head in enumerate(self.heads)])


class Scrape:
    """The /metrics text of a Summary, with the control plane's own gauges and its replica events."""

    def __init__(self, gauges: Gauges | None = None, replica_events: ReplicaCounts | None = None) -> None:
        self.gauges = gauges if gauges is not None else {}
        self.replica_events = replica_events
        self.nodes: Kept[NodeLine] = Kept(node_families, node_samples, lambda n: n.node)
        self.replicas: Kept[ReplicaLine] = Kept(replica_families, replica_samples, lambda r: r.id)

    def text(self, s: Summary) -> bytes:
        f = Formats()
        events = replica_events(self.replica_events()) if self.replica_events is not None else ()
        return b"".join([  # in the order SummaryCollector yields the families
            text([*own_gauges(self.gauges), *cluster_families(s)], f).encode(),
            self.nodes.text(s.nodes),
            text([unresolved(s), replica_counts(s)], f).encode(),
            self.replicas.text(s.replicas),
            text([*model_lines(s), *requests_families(s), adapter_family(s), ready_family(s.ready_times), *events],
                 f).encode(),
        ])
