"""The ready replicas of each model as the router routes to them: in-flight counts, and outlier ejection.

A replica whose engine fails EJECT_AFTER requests in a row (a 5xx of its own, an answer that is not an answer, no
first byte in time: an engine can answer /health and be wedged) is left out of routing for a while, doubling from
EJECT_BASE_S to EJECT_MAX_S while it keeps failing after each return (Envoy's outlier ejection, in small). Only
while another replica of the model is in rotation: with every replica ejected, they are all tried.

An engine saying it has no such endpoint is the request's fault, not the replica's: it never counts as a failure.
A path the engine answered 405 or 501 for (what it does not implement: llama-server's embeddings without
`--embeddings`) is remembered per replica for UNSERVED_S, and not sent to it again meanwhile. A 404 is not
remembered: engines also answer 404 for what a request names (a model, a stored response), which any client can
make up, so remembering it would let one client close a path for every tenant.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from yarl import URL

from llmgw.api.router import ReadyReplica

EJECT_AFTER = 3
EJECT_BASE_S = 30.0
EJECT_MAX_S = 300.0
UNSERVED = (405, 501)  # an engine's answers that say the path is not implemented, whatever the request
UNSERVED_S = 300.0  # then asked again: the engine restarted with other flags keeps its replica id


@dataclass
class Route:
    replica_id: str
    endpoint: str
    secret: str = ""
    outstanding: int = 0
    closes_after_stream: bool = False
    slots: int | None = None
    failures: int = 0  # in a row
    ejections: int = 0  # in a row: each one longer
    ejected_until: float = 0.0  # monotonic seconds
    unserved: dict[str, float] = field(default_factory=dict)  # path -> until when it is known not served (monotonic)
    _urls: dict[str, URL] = field(default_factory=dict, repr=False)  # parsed once per path, not per request

    def url(self, path: str) -> URL:
        """The engine's URL for one of the router's paths (a fixed few)."""
        u = self._urls.get(path)
        if u is None:
            u = self._urls[path] = URL(self.endpoint + path)
        return u

    def failed(self, now: float) -> float:
        """One more failure; the ejection's length when this one ejects it, else 0."""
        self.failures += 1
        if self.failures < EJECT_AFTER:
            return 0.0
        length: float = min(EJECT_MAX_S, EJECT_BASE_S * 2.0 ** self.ejections)
        self.failures, self.ejections, self.ejected_until = 0, self.ejections + 1, now + length
        return length

    def serves(self, path: str, now: float) -> bool:
        """False while the engine is known not to serve this path."""
        return self.unserved.get(path, 0.0) <= now

    def not_served(self, path: str, status: int, now: float) -> bool:
        """Remember that the engine answered `status` for `path`: whether that is now known not served."""
        if status not in UNSERVED:
            return False
        self.unserved[path] = now + UNSERVED_S  # a fixed few paths: bounded
        return True

    def served(self) -> None:
        self.failures = 0
        if self.ejected_until:
            self.ejections, self.ejected_until = 0, 0.0


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
                if route.endpoint != rep.endpoint:
                    route.endpoint = rep.endpoint
                    route._urls.clear()
                route.secret = rep.secret
                route.closes_after_stream, route.slots = rep.closes_after_stream, rep.slots
                routes.append(route)
            fresh[model] = routes
        self.routes = fresh
        self.generation = generation

    def in_rotation(self, model: str, exclude: set[str], now: float, path: str = "") -> list[Route]:
        """The model's routes not excluded and not known to lack `path`, less the ejected ones while any other is
        left."""
        routes = [r for r in self.routes.get(model, ())
                  if r.replica_id not in exclude and (not path or r.serves(path, now))]
        live = [r for r in routes if r.ejected_until <= now]
        return live or routes

    def unserved(self, model: str, path: str, now: float) -> bool:
        """Whether every ready replica of the model said it does not serve `path` (and there is one)."""
        routes = self.routes.get(model, ())
        return bool(routes) and not any(r.serves(path, now) for r in routes)

    def pick(self, model: str, exclude: set[str] | None = None) -> Route | None:
        best: Route | None = None
        for r in self.routes.get(model, ()):
            if exclude and r.replica_id in exclude:
                continue
            if best is None or r.outstanding < best.outstanding:
                best = r
        return best
