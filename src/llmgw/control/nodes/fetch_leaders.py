"""Who fetches each remote file from its origin, per fabric: the choices made so far and a version that moves when
they do (a desired state derived before a change may name another fetcher, so it is derived again). Soft state:
after a restart it is chosen again from what the nodes report fetching. The choice itself is pure
(control/nodes/weights.py); this owner keeps it between heartbeats."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from llmgw.config.server import ModelSpec
from llmgw.control.nodes.weights import Leaders, plans_for, prune
from llmgw.records.state import NodeRecord, ReplicaRecord
from llmgw.wire.messages import WeightsPlan


class FetchLeaders:
    def __init__(self) -> None:
        self.leaders: Leaders = {}
        self.version = 0

    def plans(self, node_id: str, nodes: dict[str, NodeRecord], replicas: Iterable[ReplicaRecord],
              models: dict[str, ModelSpec], revoked: frozenset[str],
              hub: Mapping[str, WeightsPlan]) -> dict[str, WeightsPlan]:
        """The node's weights plans; the fetchers they chose are kept (only for sources of the catalog and nodes
        that still report, so the choices never outgrow the fleet)."""
        plans, chosen = plans_for(node_id, nodes, replicas, models, self.leaders, revoked, hub)
        if chosen:
            sources = {m.source for m in models.values()} | {a.source for m in models.values() for a in m.adapters}
            leaders = prune({**self.leaders, **chosen}, nodes, sources)
            if leaders != self.leaders:
                self.leaders = leaders
                self.version += 1
        return plans
