"""The management API on admin_listen (loopback by default): nodes, status, explain, events, keys, metrics."""

from __future__ import annotations

import json

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from llmgw.control.metrics import registry
from llmgw.control.plane import ControlPlane
from llmgw.control.summary import Summary, summarize
from llmgw.control.views import node_row
from llmgw.router.keys import new_key
from llmgw.router.state import Activity, RouterView, ready_table


def summary_of(plane: ControlPlane) -> Summary:
    return summarize(
        list(plane.nodes.values()),
        list(plane.replicas.values()),
        plane.store.usage_totals(),
        plane.last_used,
        plane.clock.now(),
    )


def metrics_routes(plane: ControlPlane) -> list[web.RouteDef]:
    reg = registry(lambda: summary_of(plane))

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(reg), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    return [web.get("/metrics", metrics), web.get("/health", health)]


def admin_app(plane: ControlPlane) -> web.Application:
    def js(data: object, status: int = 200) -> web.Response:
        return web.Response(text=json.dumps(data, default=str), status=status, content_type="application/json")

    async def nodes(_: web.Request) -> web.Response:
        return js([node_row(n).model_dump() for n in sorted(plane.nodes.values(), key=lambda n: n.id)])

    async def node(request: web.Request) -> web.Response:
        rec = plane.nodes.get(request.match_info["id"])
        if rec is None:
            return js({"error": f"no node {request.match_info['id']}"}, 404)
        return js(rec.model_dump())

    async def status(_: web.Request) -> web.Response:
        return js(summary_of(plane).model_dump())

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
        return js([r.model_dump() for r in sorted(plane.replicas.values(), key=lambda r: r.id)])

    async def explain(request: web.Request) -> web.Response:
        return js({"model": request.match_info["model"], "lines": plane.explain(request.match_info["model"])})

    async def events(request: web.Request) -> web.Response:
        limit = int(request.query.get("limit", "100"))
        return js([e.model_dump() for e in plane.store.list_events(limit)])

    async def list_keys(_: web.Request) -> web.Response:
        return js([k.model_dump(exclude={"hash"}) for k in plane.store.list_keys()])

    async def create_key(request: web.Request) -> web.Response:
        try:
            body = await request.json()
            name = str(body["name"])
            allowed = [str(m) for m in body.get("models", [])]
        except (ValueError, KeyError, TypeError):
            return js({"error": 'body must be {"name": ..., "models": [...]}'}, 400)
        unknown = [m for m in allowed if m not in plane.models]
        if unknown:
            return js({"error": f"unknown model(s): {', '.join(unknown)}"}, 400)
        raw, rec = new_key(name, allowed, plane.clock)
        plane.store.put_key(rec)
        plane.keys_changed()
        return js({"key": raw, **rec.model_dump(exclude={"hash"})}, 201)

    async def revoke_key(request: web.Request) -> web.Response:
        kid = request.match_info["id"]
        for k in plane.store.list_keys():
            if k.id == kid or k.name == kid:
                plane.store.put_key(k.model_copy(update={"revoked_at": plane.clock.now()}))
                plane.keys_changed()
                return js({"revoked": k.id})
        return js({"error": f"no key {kid}"}, 404)

    async def router_view(_: web.Request) -> web.Response:
        view = RouterView(
            generation=plane.generation,
            keys_version=plane.keys_version,
            models=list(plane.models.values()),
            ready=ready_table(plane),
        )
        return web.Response(text=view.model_dump_json(), content_type="application/json")

    async def router_activity(request: web.Request) -> web.Response:
        act = Activity.model_validate_json(await request.read())
        for model, at in act.demand.items():
            if model in plane.models:
                plane.demand[model] = max(at, plane.demand.get(model, 0.0))
        for rid, at in act.used.items():
            plane.used(rid, at)
        plane.outstanding.update(act.outstanding)
        plane.store.add_usage(act.usage)
        return js({"ok": True})

    app = web.Application()
    app.add_routes(metrics_routes(plane))
    app.add_routes(
        [
            web.get("/api/nodes", nodes),
            web.get("/api/nodes/{id}", node),
            web.get("/api/status", status),
            web.get("/api/models", models),
            web.get("/api/replicas", replicas),
            web.get("/api/explain/{model}", explain),
            web.get("/api/events", events),
            web.get("/api/router/view", router_view),
            web.post("/api/router/activity", router_activity),
            web.get("/api/keys", list_keys),
            web.post("/api/keys", create_key),
            web.delete("/api/keys/{id}", revoke_key),
        ]
    )
    return app
