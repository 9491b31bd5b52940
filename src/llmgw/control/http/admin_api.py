"""The management API on admin_listen (loopback by default): nodes, status, explain, events, keys, metrics."""

from __future__ import annotations

import logging
import re
import unicodedata
from collections.abc import Callable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from llmgw.api.model_weights import ModelWeights, model_weights
from llmgw.api.views import node_row
from llmgw.config.server import ModelSpec
from llmgw.control.http.admin_auth import guard
from llmgw.control.http.dashboard_routes import dashboard_routes
from llmgw.control.http.keys_api import BadRequest, js, json_body, key_routes
from llmgw.control.http.openapi import openapi
from llmgw.control.http.router_api import RouterRoutes
from llmgw.control.nodes.registry import revoke_node
from llmgw.control.tenants.limit_counters import LimitCounters
from llmgw.control.views.metrics import Gauges
from llmgw.control.views.scrape import Scrape
from llmgw.control.views.status import NODES_SHOWN, StatusJson, StatusSources, summary_of
from llmgw.core.errors import PKIError, StoreError, StoreRejected
from llmgw.pki.ca import validate_node_id

log = logging.getLogger(__name__)
MAX_LIMIT = 1000
MAX_BODY = 16 * 1024 * 1024  # activity reports from router workers carry usage batches


Health = Callable[[], dict[str, object]]


def metrics_routes(status: StatusSources, gauges: Gauges, health: Health) -> list[web.RouteDef]:
    scrape = Scrape(gauges, lambda: status.registry.replica_counts)  # keeps each node's and replica's samples

    async def metrics(_: web.Request) -> web.Response:
        if not status.passes.done:  # before the first pass, every number would be a guess: say so, never empty
            return web.Response(status=503, text="metrics not ready: the control plane has not finished its first "
                                "reconcile pass\n", headers={"Retry-After": "1"})
        return web.Response(body=scrape.text(await summary_of(status)), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def alive(_: web.Request) -> web.Response:
        # alive (200) whatever else it says: serving outlives the store; the body says what is degraded and who leads
        return web.json_response(health())

    return [web.get("/metrics", metrics), web.get("/health", alive)]


def normal_serial(text: str) -> str | None:
    """A serial as the agent listener writes it (lower-case hex, no leading zeros), from any usual spelling
    ("0A:1B", "0x0a1b", "A1B"); "" stays "" (the whole node); None when it is no serial."""
    t = text.strip().lower().replace(":", "").removeprefix("0x")
    if not t:
        return ""
    if len(t) > 64 or not re.fullmatch(r"[0-9a-f]+", t):
        return None
    return f"{int(t, 16):x}"


def plain_text(field: str, text: str) -> str:
    """`text` if it holds no control character (C0, DEL, C1: a NUL cannot even be stored by PostgreSQL, and a
    terminal would act on the rest) and is valid Unicode; else BadRequest naming the field and the character."""
    bad = next((c for c in text if unicodedata.category(c) in ("Cc", "Cs")), None)
    if bad is None:
        return text
    what = "not text (a lone surrogate)" if unicodedata.category(bad) == "Cs" else "a control character"
    raise BadRequest(f"{field} must be plain text: it holds {what}, U+{ord(bad):04X}")


def limit_of(request: web.Request, default: int = 100) -> int:
    raw = request.query.get("limit", str(default))
    if not re.fullmatch(r"[0-9]{1,9}", raw):
        raise BadRequest(f"limit must be a whole number, not {raw[:20]!r}")
    return max(1, min(int(raw), MAX_LIMIT))


def count_of(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    """A whole-number query parameter from low to high; anything else is refused."""
    raw = request.query.get(name, str(default))
    if not re.fullmatch(r"[0-9]{1,10}", raw) or not low <= int(raw) <= high:
        raise BadRequest(f"{name} must be a whole number from {low} to {high}, not {raw[:20]!r}")
    return int(raw)


@web.middleware
async def bad_requests(request: web.Request, handler: Any) -> web.StreamResponse:
    """A malformed request is the client's mistake: one line in the log, a 400 that says why, nothing changed."""
    try:
        return await handler(request)  # type: ignore[no-any-return]
    except BadRequest as e:
        log.info("management API: %s %s refused: %s", request.method, request.path, e)
        return js({"error": str(e)}, 400)
    except StoreError as e:  # the store unreachable: the operator is told so, in the store's words
        log.warning("management API: %s %s: the store failed: %s", request.method, request.path, e)
        return js({"error": f"the store cannot be reached now: {e}"}, 503)
    except StoreRejected as e:  # a value the database cannot keep: nothing was written, nothing changed
        log.info("management API: %s %s: the store refused it: %s", request.method, request.path, e)
        return js({"error": f"the store refused the value: {e}"}, 400)


class AdminRoutes:
    """The cluster as an operator reads it (nodes, models, replicas, explain, events) and cuts keys or nodes off."""

    def __init__(self, status: StatusSources) -> None:
        self.status = status
        self.registry = status.registry
        self.credentials = status.credentials
        self.storage = status.storage
        self.status_json = StatusJson()  # each line's JSON, kept per line

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/api/nodes", self.nodes),
            web.get("/api/nodes/{id}", self.node),
            web.get("/api/status", self.summary),
            web.get("/api/models", self.models),
            web.get("/api/replicas", self.replicas),
            web.get("/api/explain/{model}", self.explain),
            web.get("/api/openapi.json", self.schema),
            web.get("/api/events", self.events),
            web.delete("/api/keys/{id}", self.revoke_key),
            web.post("/api/keys/revoke", self.revoke_by_name),
            web.post("/api/nodes/{id}/revoke", self.revoke_node),
        ]

    async def nodes(self, _: web.Request) -> web.Response:
        reg = self.registry
        return js([node_row(n, reg.heard(n.id)).model_dump() for n in sorted(reg.nodes.values(), key=lambda n: n.id)])

    async def node(self, request: web.Request) -> web.Response:
        rec = self.registry.nodes.get(request.match_info["id"])
        if rec is None:
            return js({"error": f"no node {request.match_info['id']}"}, 404)
        # what the node reported, and our bookkeeping (no secret is in a node record); last seen counts its renewals
        return js({**rec.model_dump(), "last_seen": self.registry.heard(rec.id)})

    async def summary(self, request: web.Request) -> web.Response:
        first = count_of(request, "nodes_from", 0, 0, 10**9)
        limit = count_of(request, "nodes_limit", NODES_SHOWN, 1, 100_000)
        return js(self.status_json.data(await summary_of(self.status), first, limit))

    def weights(self, models: dict[str, ModelSpec]) -> dict[str, ModelWeights]:
        """Where the weights of `models` stand (api/model_weights.py), by model name."""
        reg = self.registry
        view = model_weights(models, reg.nodes.values(), reg.replicas.values(), self.status.hub())
        return {w.model: w for w in view}

    async def models(self, _: web.Request) -> web.Response:
        out = []
        weights = self.weights(self.registry.models)
        for m in self.registry.models.values():
            reps = [r for r in self.registry.replicas.values() if r.model == m.name]
            out.append(
                {
                    "name": m.name,
                    "engine": m.engine,
                    "source": m.source,
                    "min": m.scaling.min,
                    "max": m.scaling.max,
                    "on_demand": m.on_demand,
                    "gpus_per_shard": m.profile.gpus_per_shard,
                    "nodes": m.profile.nodes,
                    "replicas": len(reps),
                    "ready": sum(1 for r in reps if r.ready),
                    "weights": w.model_dump() if (w := weights.get(m.name)) is not None else None,
                }
            )
        return js(out)

    async def replicas(self, _: web.Request) -> web.Response:
        reps = sorted(self.registry.replicas.values(), key=lambda r: r.id)
        return js([r.model_dump(exclude={"secret"}) for r in reps])

    async def explain(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        told = self.registry.explain(name)
        spec = self.registry.models.get(name)
        if spec is not None:
            told.weights = self.weights({name: spec}).get(name)
        return web.Response(text=told.model_dump_json(), content_type="application/json")

    async def schema(self, _: web.Request) -> web.Response:
        return js(openapi())

    async def events(self, request: web.Request) -> web.Response:
        return js([e.model_dump() for e in await self.storage.read(self.storage.store.list_events,
                                                                   limit_of(request))])

    async def revoke_key(self, request: web.Request) -> web.Response:
        """By id only: a name can stand for several keys (a rotation leaves two), and guessing which is how the
        wrong one stays live."""
        kid = request.match_info["id"]
        key = next((k for k in await self.storage.read(self.storage.store.list_keys) if k.id == kid), None)
        if key is None:
            return js({"error": f"no key with id {kid} (by name: POST /api/keys/revoke with a name)"}, 404)
        if key.revoked_at is not None:
            return js({"revoked": [], "already_revoked": [kid]})
        return js({"revoked": await self.credentials.revoke_keys(lambda k: k.id == kid)})

    async def revoke_by_name(self, request: web.Request) -> web.Response:
        body = await json_body(request)
        name = body.get("name") if isinstance(body, dict) else None
        if not isinstance(name, str) or not name:
            return js({"error": 'body must be {"name": ...}'}, 400)
        if not any(k.name == name for k in await self.storage.read(self.storage.store.list_keys)):
            return js({"error": f"no key named {name!r}"}, 404)
        return js({"revoked": await self.credentials.revoke_keys(lambda k: k.name == name)})

    async def revoke_node(self, request: web.Request) -> web.Response:
        node_id = request.match_info["id"]
        body = await json_body(request) if request.can_read_body else {}
        if not isinstance(body, dict):
            return js({"error": 'body must be {"serial": "...", "reason": "..."}'}, 400)
        serial = normal_serial(str(body.get("serial", "") or ""))
        reason = plain_text("reason", str(body.get("reason", "") or "")[:256])
        if serial is None:
            return js({"error": "serial must be a certificate serial in hex (colons allowed)"}, 400)
        if node_id not in self.registry.nodes:
            try:
                validate_node_id(node_id)
            except PKIError as e:
                raise BadRequest(str(e)[:300]) from None
            if not serial:
                return js({"error": f"no node {node_id} (a node never seen can still be revoked by --serial)"}, 404)
        said = await revoke_node(self.credentials, self.registry, self.storage, node_id, serial, reason)
        return js({"revoked": node_id, "serial": serial, "message": said})


def admin_app(status: StatusSources, limit_counters: LimitCounters, gauges: Gauges, health: Health, token: str,
              hosts: frozenset[str],
              any_ip: bool = False) -> web.Application:
    """The management API: what it reads of the cluster (`status`), keys' counters (`limit_counters`), the control
    plane's
    own gauges and health; behind the operator token and the allowed Host names."""
    app = web.Application(client_max_size=MAX_BODY, middlewares=[guard(token, hosts, any_ip), bad_requests])
    app.add_routes(metrics_routes(status, gauges, health))
    app.add_routes(dashboard_routes(lambda: summary_of(status)))
    app.add_routes(key_routes(status.credentials, limit_counters, status.storage, status.registry.models,
                              status.charges.currency))
    app.add_routes(RouterRoutes(status.registry, status.activity, status.credentials, limit_counters,
                                status.storage, status.ready_times).routes())
    app.add_routes(AdminRoutes(status).routes())
    return app
