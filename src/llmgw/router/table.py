"""Least outstanding requests among ready replicas of a model."""

from __future__ import annotations

from dataclasses import dataclass

from llmgw.wire.router import ReadyReplica


@dataclass
class Route:
    replica_id: str
    endpoint: str
    secret: str = ""
    outstanding: int = 0


class RoutingTable:
    def __init__(self) -> None:
        self.routes: dict[str, list[Route]] = {}
        self.generation = -1

    def update(self, generation: int, ready: dict[str, list[ReadyReplica]]) -> None:
        """Rebuild from the ready replicas per model, keeping in-flight counts of replicas that stay."""
        old = {r.replica_id: r for routes in self.routes.values() for r in routes}
        fresh: dict[str, list[Route]] = {}
        for model, replicas in ready.items():
            routes = []
            for rep in sorted(replicas, key=lambda x: x.id):
                route = old.get(rep.id) or Route(rep.id, rep.endpoint, rep.secret)
                route.endpoint, route.secret = rep.endpoint, rep.secret
                routes.append(route)
            fresh[model] = routes
        self.routes = fresh
        self.generation = generation

    def pick(self, model: str, exclude: set[str] | None = None) -> Route | None:
        best: Route | None = None
        for r in self.routes.get(model, ()):
            if exclude and r.replica_id in exclude:
                continue
            if best is None or r.outstanding < best.outstanding:
                best = r
        return best
