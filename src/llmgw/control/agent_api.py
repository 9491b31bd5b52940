"""The agents' door: mutual TLS; the node id is the certificate's CN and a node writes only its own record."""

from __future__ import annotations

from aiohttp import web
from pydantic import ValidationError

from llmgw.config.loader import describe
from llmgw.control.plane import ControlPlane
from llmgw.pki.tls import peer_node_id
from llmgw.wire.messages import WIRE_VERSION, NodeReport


def agent_app(plane: ControlPlane) -> web.Application:
    async def heartbeat(request: web.Request) -> web.Response:
        peer = peer_node_id(request.transport.get_extra_info("peercert") if request.transport else None)
        if peer is None:
            return web.json_response({"error": "no verified client certificate"}, status=401)
        raw = await request.read()
        try:
            report = NodeReport.model_validate_json(raw)
        except ValidationError as e:
            return web.json_response({"error": "invalid heartbeat", "problems": describe(e)}, status=422)
        if report.version != WIRE_VERSION:
            return web.json_response(
                {"error": f"wire version {report.version} not understood; this control plane speaks {WIRE_VERSION}"},
                status=422,
            )
        if report.node_id != peer:
            return web.json_response(
                {"error": f"certificate is for node {peer!r}; it may not write node {report.node_id!r}"}, status=403
            )
        desired = plane.heartbeat(report)
        return web.Response(text=desired.model_dump_json(), content_type="application/json")

    app = web.Application(client_max_size=16 * 1024 * 1024)
    app.router.add_post("/v1/agent/heartbeat", heartbeat)
    return app
