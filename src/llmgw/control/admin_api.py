"""The management API on admin_listen (loopback by default): nodes, status, explain, events, keys, metrics."""

from __future__ import annotations

import json
import logging
import re
import unicodedata
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import ValidationError

from llmgw.config.server import ModelSpec
from llmgw.control.admin_auth import guard
from llmgw.control.dashboard import dashboard_routes
from llmgw.control.exposition import render
from llmgw.control.metrics import registry
from llmgw.control.openapi import openapi
from llmgw.control.plane import ControlPlane
from llmgw.control.summary import DAY, Demand, Summary, summarize
from llmgw.control.tenants_api import BadRequest, json_body, tenant_routes
from llmgw.control.views import node_row
from llmgw.core.errors import PKIError, StoreError, StoreRejected
from llmgw.core.state import not_answering
from llmgw.pki.ca import validate_node_id
from llmgw.wire.router import Activity, Admission, AdmitRequest, RouterView

log = logging.getLogger(__name__)
MAX_LIMIT = 1000
MAX_BODY = 16 * 1024 * 1024  # activity reports from router workers carry usage batches


async def summary_of(plane: ControlPlane) -> Summary:
    now = plane.clock.now()
    names = plane.key_names()
    if names is None:
        try:
            names = await plane.read(plane.refresh_key_names)  # keys changed: read once, off the event loop
        except StoreError:  # the store is out: the names known before do (the view and the scrape go on)
            names = plane.known_key_names()
    return summarize(
        list(plane.nodes.values()),
        list(plane.replicas.values()),
        plane.usage.totals(),  # kept in memory as usage is recorded: no store read on a page view or a scrape
        plane.last_used,
        now,
        sources=sources_of(plane.models),
        models=plane.models,
        demand=Demand(wanted_at=dict(plane.demand), window=plane.timings.demand_window,
                      in_flight=plane.outstanding()),
        recent=plane.usage.recent(now - DAY),
        key_names=names,
        requests=plane.request_stats(),
        facts=plane.node_facts,
    )


def sources_of(models: dict[str, ModelSpec]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, m in sorted(models.items()):
        out.setdefault(m.source, []).append(name)
    return out


def metrics_routes(plane: ControlPlane) -> list[web.RouteDef]:
    latest: list[Summary] = []
    reg = registry(lambda: latest[-1], plane.gauges, lambda: plane.replica_counts)

    async def metrics(_: web.Request) -> web.Response:
        if not plane.passes:  # before the first pass, every number would be a guess: say so, never an empty page
            return web.Response(status=503, text="metrics not ready: the control plane has not finished its first "
                                "reconcile pass\n", headers={"Retry-After": "1"})
        latest[:] = [await summary_of(plane)]
        return web.Response(body=render(reg), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def health(_: web.Request) -> web.Response:
        # alive (200) whatever else it says: serving outlives the store; the body says what is degraded and who leads
        return web.json_response(plane.health())

    return [web.get("/metrics", metrics), web.get("/health", health)]


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


def admin_app(plane: ControlPlane, token: str, hosts: frozenset[str], any_ip: bool = False) -> web.Application:
    def js(data: object, status: int = 200) -> web.Response:
        return web.Response(text=json.dumps(data, default=str), status=status, content_type="application/json")

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

    async def nodes(_: web.Request) -> web.Response:
        return js([node_row(n).model_dump() for n in sorted(plane.nodes.values(), key=lambda n: n.id)])

    async def node(request: web.Request) -> web.Response:
        rec = plane.nodes.get(request.match_info["id"])
        if rec is None:
            return js({"error": f"no node {request.match_info['id']}"}, 404)
        return js(rec.model_dump())  # what the node reported, and our bookkeeping: no secret is in a node record

    async def status(_: web.Request) -> web.Response:
        return js((await summary_of(plane)).model_dump())

    async def models(_: web.Request) -> web.Response:
        out = []
        for m in plane.models.values():
            reps = [r for r in plane.replicas.values() if r.model == m.name]
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
                }
            )
        return js(out)

    async def replicas(_: web.Request) -> web.Response:
        return js([r.model_dump(exclude={"secret"}) for r in sorted(plane.replicas.values(), key=lambda r: r.id)])

    async def explain(request: web.Request) -> web.Response:
        return web.Response(text=plane.explain(request.match_info["model"]).model_dump_json(),
                            content_type="application/json")

    async def schema(_: web.Request) -> web.Response:
        return js(openapi())

    async def events(request: web.Request) -> web.Response:
        return js([e.model_dump() for e in await plane.read(plane.store.list_events, limit_of(request))])

    async def revoke_key(request: web.Request) -> web.Response:
        """By id only: a name can stand for several keys (a rotation leaves two), and guessing which is how the
        wrong one stays live."""
        kid = request.match_info["id"]
        key = next((k for k in await plane.read(plane.store.list_keys) if k.id == kid), None)
        if key is None:
            return js({"error": f"no key with id {kid} (by name: POST /api/keys/revoke with a name)"}, 404)
        if key.revoked_at is not None:
            return js({"revoked": [], "already_revoked": [kid]})
        return js({"revoked": await plane.revoke_keys(lambda k: k.id == kid)})

    async def revoke_by_name(request: web.Request) -> web.Response:
        body = await json_body(request)
        name = body.get("name") if isinstance(body, dict) else None
        if not isinstance(name, str) or not name:
            return js({"error": 'body must be {"name": ...}'}, 400)
        if not any(k.name == name for k in await plane.read(plane.store.list_keys)):
            return js({"error": f"no key named {name!r}"}, 404)
        return js({"revoked": await plane.revoke_keys(lambda k: k.name == name)})

    async def revoke_node(request: web.Request) -> web.Response:
        node_id = request.match_info["id"]
        body = await json_body(request) if request.can_read_body else {}
        if not isinstance(body, dict):
            return js({"error": 'body must be {"serial": "...", "reason": "..."}'}, 400)
        serial = normal_serial(str(body.get("serial", "") or ""))
        reason = plain_text("reason", str(body.get("reason", "") or "")[:256])
        if serial is None:
            return js({"error": "serial must be a certificate serial in hex (colons allowed)"}, 400)
        if node_id not in plane.nodes:
            try:
                validate_node_id(node_id)
            except PKIError as e:
                raise BadRequest(str(e)[:300]) from None
            if not serial:
                return js({"error": f"no node {node_id} (a node never seen can still be revoked by --serial)"}, 404)
        return js({"revoked": node_id, "serial": serial, "message": await plane.revoke(node_id, serial, reason)})

    async def router_view(_: web.Request) -> web.Response:
        view = RouterView(
            generation=plane.generation,
            keys_version=plane.keys_version,
            models=list(plane.models.values()),
            ready=plane.ready_table(),
            loads=plane.engine_loads,
            not_answering=not_answering(plane.replicas.values()),
            stale_for=plane.table_stale_for(),
        )
        return web.Response(text=view.model_dump_json(), content_type="application/json")

    async def router_admit(request: web.Request) -> web.Response:
        """A router worker's request to admit one request of a key against its limits (control/quotas.py)."""
        try:
            ask = AdmitRequest.model_validate_json(await request.read())
        except (ValidationError, RecursionError) as e:
            raise BadRequest(f"admission: {str(e).splitlines()[0]}") from None
        key = await plane.key_record(ask.key_id)
        if key is None or key.revoked_at is not None:
            answer = Admission(admitted=False, refusal="invalid_api_key", message="invalid or revoked API key")
        else:
            answer = plane.quotas.admission(key, ask.cost, ask.ticket)
        return web.Response(text=answer.model_dump_json(), content_type="application/json")

    async def router_activity(request: web.Request) -> web.Response:
        try:
            act = Activity.model_validate_json(await request.read())
        except (ValidationError, RecursionError) as e:
            raise BadRequest(f"activity report: {str(e).splitlines()[0]}") from None
        plane.record_activity(act)
        try:
            added = await plane.record_usage(act.usage)
        except StoreError as e:  # the worker keeps the batch and sends it again; ids make that harmless
            return js({"error": f"usage not recorded: {e}"}, 503)
        return js({"ok": True, "recorded": added})

    app = web.Application(client_max_size=MAX_BODY, middlewares=[guard(token, hosts, any_ip), bad_requests])
    app.add_routes(metrics_routes(plane))
    app.add_routes(dashboard_routes(lambda: summary_of(plane)))
    app.add_routes(tenant_routes(plane))
    app.add_routes(
        [
            web.get("/api/nodes", nodes),
            web.get("/api/nodes/{id}", node),
            web.get("/api/status", status),
            web.get("/api/models", models),
            web.get("/api/replicas", replicas),
            web.get("/api/explain/{model}", explain),
            web.get("/api/openapi.json", schema),
            web.get("/api/events", events),
            web.get("/api/router/view", router_view),
            web.post("/api/router/activity", router_activity),
            web.post("/api/router/admit", router_admit),
            web.delete("/api/keys/{id}", revoke_key),
            web.post("/api/keys/revoke", revoke_by_name),
            web.post("/api/nodes/{id}/revoke", revoke_node),
        ]
    )
    return app
