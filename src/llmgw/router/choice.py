"""Choose: which of a model's ready replicas a request goes to (scoring.py weighs them), and the prompt's prefix
remembered for the one chosen."""

from __future__ import annotations

from llmgw.config.server import RouterConfig
from llmgw.router.prefix import PrefixIndex
from llmgw.router.scoring import LEAST_LOADED, PREFIX, ReplicaCandidate, RouteDecision, RouteReason, Weights, choose
from llmgw.router.state import EngineLoads
from llmgw.router.table import Route, RoutingTable

HOME_BLOCKS = 16  # leading blocks that name a prompt's home replica, for ties
ALONE_KEPT = 1024  # decisions for a replica alone in rotation kept at most (then made again)


class Chooser:
    def __init__(self, state: EngineLoads, table: RoutingTable, cfg: RouterConfig) -> None:
        self.state = state
        self.table = table
        self.cfg = cfg
        self.prefixes = PrefixIndex(cfg.prefix_entries)
        self._alone: dict[str, RouteDecision] = {}  # the decision for a replica alone in rotation (made once: frozen)

    def choose(self, model: str, tried: set[str], keys: list[bytes], policy: str,
               path: str) -> tuple[Route | None, RouteDecision]:
        """Score the model's ready replicas not tried yet that may serve `path` (scoring.py) and remember the prefix
        for the chosen."""
        routes = self.table.in_rotation(model, tried, self.state.clock.monotonic(), path)
        if len(routes) == 1 and not keys:  # nothing to weigh: the one replica, as choose() would have it
            alone = self._alone.get(routes[0].replica_id)
            if alone is None:
                if len(self._alone) >= ALONE_KEPT:
                    self._alone.clear()
                alone = self._alone[routes[0].replica_id] = RouteDecision(routes[0].replica_id, RouteReason.LeastLoaded,
                                                                     0, ())
            return routes[0], alone
        loads = self.state.loads()
        matched = self.prefixes.matches(keys) if keys else {}
        cands = []
        for r in routes:
            load = loads.get(r.replica_id)
            cands.append(ReplicaCandidate(r.replica_id, r.outstanding, load.running if load else None,
                                   load.waiting if load else None, matched.get(r.replica_id, 0), r.slots))
        weights = Weights(load=1.0, prefix=PREFIX.prefix, margin=self.cfg.prefix_margin) \
            if policy == "prefix" else LEAST_LOADED
        # the prompt's first kilobyte or so names its home replica among equals (scoring.py)
        decision = choose(cands, len(keys), weights, keys[min(len(keys), HOME_BLOCKS) - 1] if keys else b"")
        route = next((r for r in routes if r.replica_id == decision.replica_id), None)
        if route is not None and keys:
            self.prefixes.record(keys, route.replica_id)
        return route, decision
