"""The cluster's summary as the management API, the dashboard and the metrics read it: made from the owners' state
in memory, with no store read (key names aside, read once after keys change; GPU time charged, read at most every
few seconds: control/chargeback/charge_book.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from llmgw.api.views import ReadyTime
from llmgw.config.server import ModelSpec
from llmgw.control.activity.activity import Activity
from llmgw.control.chargeback.charge_book import ChargeBook
from llmgw.control.nodes.passes import Passes
from llmgw.control.nodes.registry import Registry
from llmgw.control.storage.storage import Storage
from llmgw.control.tenants.credentials import Credentials
from llmgw.control.tenants.usage_totals import DAY, UsageTotals
from llmgw.control.views.summary import (
    Demand,
    NodeLine,
    NodeSummaryFacts,
    ReplicaLine,
    ReplicaLines,
    Summary,
    node_facts,
    summarize,
)
from llmgw.core.errors import StoreError
from llmgw.records.state import NodeRecord
from llmgw.wire.hub import HubState

HubStates = Callable[[], Mapping[str, HubState]]


def no_hub() -> Mapping[str, HubState]:
    """No hub owner wired: every hub model reads as still resolving (never as resolved)."""
    return {}


class NodeFactsKept:
    """The summary's facts of each node record, derived once per record (a node's record changes when it reports or
    is lost): at 1,000 nodes deriving them costs more than the rest of a page view."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[NodeRecord, NodeSummaryFacts]] = {}

    def __call__(self, rec: NodeRecord) -> NodeSummaryFacts:
        held = self._held.get(rec.id)
        if held is not None and held[0] is rec:
            return held[1]
        f = node_facts(rec)
        self._held[rec.id] = (rec, f)
        return f


@dataclass(frozen=True)
class StatusSources:
    """The owners a summary is read from."""

    registry: Registry
    activity: Activity
    credentials: Credentials
    storage: Storage
    usage: UsageTotals
    passes: Passes
    hub: HubStates = no_hub  # model name -> its hub source's state (the owner resolving hub sources keeps it)
    replica_lines: ReplicaLines = field(default_factory=ReplicaLines)  # each replica's line, kept per record
    node_facts: NodeFactsKept = field(default_factory=NodeFactsKept)  # each node's facts, kept per record
    ready_times: Callable[[], list[ReadyTime]] = list  # each way to ready as measured (control/nodes/ready_times.py)
    charges: ChargeBook = field(default_factory=ChargeBook)  # GPU time and cost per key (chargeback/charge_book.py)


async def summary_of(s: StatusSources) -> Summary:
    now = s.storage.clock.now()
    names = s.credentials.key_names()
    if names is None:
        try:
            names = await s.storage.read(s.credentials.refresh_key_names)  # keys changed: read once, off the loop
        except StoreError:  # the store is out: the names known before do (the view and the scrape go on)
            names = s.credentials.known_key_names()
    reg, act = s.registry, s.activity
    out = summarize(
        list(reg.nodes.values()),
        list(reg.replicas.values()),
        s.usage.totals(),  # kept in memory as usage is recorded: no store read on a page view or a scrape
        act.last_used,
        now,
        sources=sources_of(reg.models),
        models=reg.models,
        demand=Demand(wanted_at=dict(act.demand), window=s.passes.timings.demand_window,
                      in_flight=act.outstanding()),
        recent=s.usage.recent(now - DAY),
        key_names=names,
        requests=act.request_stats(),
        facts=s.node_facts,
        hub=s.hub(),
        replica_lines=s.replica_lines,
    )
    out.ready_times = s.ready_times()
    out.gpu_time = await s.charges.charges_by_key(s.storage, now - DAY, names)
    return out


def sources_of(models: dict[str, ModelSpec]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, m in sorted(models.items()):
        out.setdefault(m.source, []).append(name)
    return out


NODES_SHOWN = 1000  # /api/status's nodes by default: a page; the totals and every replica are always there


class StatusJson:
    """The Summary as /api/status answers it, each node's and replica's line made JSON-ready once per line (a line
    is kept per record) rather than at every request; nodes a page at a time."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[NodeLine, dict[str, Any]]] = {}
        self.replicas: dict[str, tuple[ReplicaLine, dict[str, Any]]] = {}

    def data(self, s: Summary, nodes_from: int = 0, nodes_limit: int = NODES_SHOWN) -> dict[str, Any]:
        out = s.model_dump(exclude={"nodes", "replicas"})
        shown = s.nodes[nodes_from:nodes_from + nodes_limit]
        held, self.nodes = self.nodes, {}
        for n in shown:
            h = held.get(n.node)
            self.nodes[n.node] = h if h is not None and h[0] is n else (n, n.model_dump())
        held_r, self.replicas = self.replicas, {}
        for r in s.replicas:
            hr = held_r.get(r.id)
            self.replicas[r.id] = hr if hr is not None and hr[0] is r else (r, r.model_dump())
        out["nodes"] = [self.nodes[n.node][1] for n in shown]
        out["replicas"] = [self.replicas[r.id][1] for r in s.replicas]
        out["nodes_from"] = nodes_from
        out["nodes_not_shown"] = len(s.nodes) - len(shown)
        return out
