"""Least outstanding requests among ready replicas of a model."""

from __future__ import annotations

from dataclasses import dataclass


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

    def update(self, generation: int, ready: dict[str, list[tuple[str, str, str]]]) -> None:
        """Rebuild from (replica id, endpoint, secret) per model, keeping in-flight counts of replicas that stay."""
        old = {r.replica_id: r for routes in self.routes.values() for r in routes}
        fresh: dict[str, list[Route]] = {}
        for model, pairs in ready.items():
            routes = []
            for rid, endpoint, secret in sorted(pairs):
                route = old.get(rid) or Route(rid, endpoint, secret)
                route.endpoint, route.secret = endpoint, secret
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
