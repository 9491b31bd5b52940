"""The cluster's summary as the management API, the dashboard and the metrics read it: made from the owners' state
in memory, with no store read (key names aside, read once after keys change)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from llmgw.config.server import ModelSpec
from llmgw.control.activity import Activity
from llmgw.control.credentials import Credentials
from llmgw.control.passes import Passes
from llmgw.control.registry import Registry
from llmgw.control.storage import Storage
from llmgw.control.summary import DAY, Demand, ReplicaLines, Summary, summarize
from llmgw.control.usage_totals import UsageTotals
from llmgw.core.errors import StoreError
from llmgw.wire.hub import HubState

HubStates = Callable[[], Mapping[str, HubState]]


def no_hub() -> Mapping[str, HubState]:
    """No hub owner wired: every hub model reads as still resolving (never as resolved)."""
    return {}


@dataclass(frozen=True)
class Status:
    """The owners a summary is read from."""

    registry: Registry
    activity: Activity
    credentials: Credentials
    storage: Storage
    usage: UsageTotals
    passes: Passes
    hub: HubStates = no_hub  # model name -> its hub source's state (the owner resolving hub sources keeps it)
    replica_lines: ReplicaLines = field(default_factory=ReplicaLines)  # each replica's line, kept per record


async def summary_of(s: Status) -> Summary:
    now = s.storage.clock.now()
    names = s.credentials.key_names()
    if names is None:
        try:
            names = await s.storage.read(s.credentials.refresh_key_names)  # keys changed: read once, off the loop
        except StoreError:  # the store is out: the names known before do (the view and the scrape go on)
            names = s.credentials.known_key_names()
    reg, act = s.registry, s.activity
    return summarize(
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
        facts=reg.node_facts,
        hub=s.hub(),
        replica_lines=s.replica_lines,
    )


def sources_of(models: dict[str, ModelSpec]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, m in sorted(models.items()):
        out.setdefault(m.source, []).append(name)
    return out
