"""The agents' door: mutual TLS; the node id is the certificate's CN and a node writes only its own record.

Only node certificates (the role `llmgw ca issue` gives them) are nodes; revoked nodes and certificates are refused;
and what a node claims about where it can be reached must be its own (see control.admission).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from llmgw.config.loader import describe
from llmgw.control.admission import IPNetwork, address_problem, ports_problem
from llmgw.control.plane import ControlPlane
from llmgw.core.buckets import Buckets
from llmgw.pki.tls import PeerIdentity, peer_identity
from llmgw.wire.messages import OLDEST_WIRE_VERSION, WIRE_VERSION, DesiredState, NodeReport

log = logging.getLogger(__name__)

MAX_HEARTBEAT_BYTES = 1024 * 1024
BURST = 20  # heartbeats a node may send at once (a restart, a failover); then HEARTBEATS_PER_INTERVAL per interval
HEARTBEATS_PER_INTERVAL = 4
WATCH_HOLD_S = 25.0  # a watch answers at the latest after this: below the agent's timeout for it, and proxies'


def _refuse(status: int, error: str, **extra: object) -> web.Response:
    return web.json_response({"error": error, **extra}, status=status)


def agent_app(
    plane: ControlPlane, listeners: Sequence[tuple[str, int]] = (), networks: Sequence[IPNetwork] = ()
) -> web.Application:
    buckets = Buckets(plane.clock, HEARTBEATS_PER_INTERVAL / plane.cfg.heartbeat_interval, BURST)

    watches = Buckets(plane.clock, HEARTBEATS_PER_INTERVAL / plane.cfg.heartbeat_interval, BURST)

    def too_often(ident: PeerIdentity, what: str) -> web.Response:
        return _refuse(429, f"node {ident.node_id}: {what} too frequent (at most {HEARTBEATS_PER_INTERVAL} per "
                            f"heartbeat interval)")

    def node_of(request: web.Request) -> PeerIdentity | web.Response:
        ident = peer_identity(request.transport.get_extra_info("ssl_object") if request.transport else None)
        if ident is None:
            return _refuse(401, "no verified client certificate")
        if not ident.node_role:
            return _refuse(403, f"certificate for {ident.node_id!r} is not a node certificate (issue one with "
                                "`llmgw ca issue`; the control plane's own certificate is not a node)")
        refused = plane.refusal(ident.node_id, ident.serial)
        if refused:
            return _refuse(403, refused)
        return ident

    async def watch(request: web.Request) -> web.Response:
        """GET /v1/agent/watch?seen=DIGEST: answers the digest of the shards this node is to run as soon as it
        differs from `seen`, or after WATCH_HOLD_S with it unchanged (control/watch.py)."""
        ident = node_of(request)
        if isinstance(ident, web.Response):
            return ident
        if not watches.take(ident.node_id):
            return too_often(ident, "watches")
        seen = request.query.get("seen", "")[:64]
        # a hold on a connection, timed like a socket timeout (the event loop's time), not by the plane's clock
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WATCH_HOLD_S
        digest = plane.node_digest(ident.node_id)
        while digest == seen and not plane.watch.closed and (left := deadline - loop.time()) > 0:
            if not await plane.watch.wait(ident.node_id, left):
                break  # the node watches again on another request: this one is answered now
            if plane.refusal(ident.node_id, ident.serial):  # revoked while it waited: it hears so from a heartbeat
                break
            digest = plane.node_digest(ident.node_id)
        return web.json_response({"digest": digest})

    async def heartbeat(request: web.Request) -> web.Response:
        ident = node_of(request)
        if isinstance(ident, web.Response):
            return ident
        if not buckets.take(ident.node_id):
            return too_often(ident, "heartbeats")
        raw = await request.read()  # by a deadline (control/guards.py)
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):
            return _refuse(422, "invalid heartbeat: not JSON")
        version = data.get("version", WIRE_VERSION) if isinstance(data, dict) else WIRE_VERSION
        # the version first: a newer agent's new fields would otherwise read as "unknown key", which sends its
        # operator looking for a typo rather than at the upgrade order
        if not isinstance(version, int) or not OLDEST_WIRE_VERSION <= version <= WIRE_VERSION:
            return _refuse(422, f"wire version {str(version)[:20]} not understood by this control plane (speaks "
                                f"{OLDEST_WIRE_VERSION}-{WIRE_VERSION}): upgrade control planes before agents",
                           speaks=WIRE_VERSION)
        try:
            report = NodeReport.model_validate(data)
        except ValidationError as e:
            return _refuse(422, "invalid heartbeat", problems=describe(e)[:20])
        except RecursionError:
            return _refuse(422, "invalid heartbeat: nested too deeply")
        if report.node_id != ident.node_id:
            return _refuse(403, f"certificate is for node {ident.node_id!r}; it may not write node {report.node_id!r}")
        problem = address_problem(report.address, request.remote, ident.ips, networks) or ports_problem(
            report.address, report.port_low, report.port_high, listeners
        )
        if problem:
            return _refuse(403, f"node {ident.node_id}: {problem}")
        desired = plane.heartbeat(report, ident.serial, ident.not_after)
        # answered in the node's own version: an agent older than this control plane (the upgrade order) must be
        # able to read what it is told
        return web.Response(text=answer_in(desired, report.version), content_type="application/json")

    app = web.Application(client_max_size=MAX_HEARTBEAT_BYTES)
    app.router.add_post("/v1/agent/heartbeat", heartbeat)
    app.router.add_get("/v1/agent/watch", watch)
    return app


def answer_in(desired: DesiredState, version: int) -> str:
    """The desired state in the node's own wire version: an agent older than this control plane (the upgrade order)
    reads strictly and would refuse a whole answer with one field it does not know, so those are left out."""
    desired = desired.model_copy(update={"version": min(version, WIRE_VERSION)})
    older: dict[str, Any] = {"shards": {"__all__": {"weights"}}, "revoked": True} if desired.version < 4 else {}
    if desired.version < 3:
        older["engine_sources"] = True
    return desired.model_dump_json(exclude=older or None)
