"""The agents' door: mutual TLS; the node id is the certificate's CN and a node writes only its own record.
A node's full report (heartbeat) and, while it has not changed, its renewals (wire/renewal.py) come here.

Only node certificates (the role `llmgw ca issue` gives them) are nodes; revoked nodes and certificates are refused;
and what a node claims about where it can be reached must be its own (see control.admission).
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from aiohttp import web
from pydantic import ValidationError

from llmgw.config.loader import describe
from llmgw.control.nodes.heartbeats import Heartbeats
from llmgw.control.nodes.node_claims import IPNetwork, address_problem, ports_problem
from llmgw.control.nodes.registry import Registry
from llmgw.control.tenants.credentials import Credentials
from llmgw.core.buckets import Buckets
from llmgw.pki.tls import PeerIdentity, peer_identity
from llmgw.wire.engines import DIGESTS_WIRE_VERSION, EngineSource
from llmgw.wire.messages import OLDEST_WIRE_VERSION, WIRE_VERSION, DesiredState, NodeReport
from llmgw.wire.renewal import MAX_RENEWAL_BYTES, RENEWAL_PATH, RENEWAL_WIRE_VERSION, SEND_REPORT, Renewal
from llmgw.wire.serving import SERVING_WIRE_VERSION

log = logging.getLogger(__name__)
Body = TypeVar("Body", NodeReport, Renewal)

MAX_HEARTBEAT_BYTES = 1024 * 1024
BURST = 20  # heartbeats a node may send at once (a restart, a failover); then HEARTBEATS_PER_INTERVAL per interval
HEARTBEATS_PER_INTERVAL = 4
WATCH_HOLD_S = 25.0  # a watch answers at the latest after this: below the agent's timeout for it, and proxies'


def _refuse(status: int, error: str, **extra: object) -> web.Response:
    return web.json_response({"error": error, **extra}, status=status)


class AgentDoor:
    """The agent listener's requests: a heartbeat (its report in, its desired state out), a renewal and a watch."""

    def __init__(self, registry: Registry, heartbeats: Heartbeats, credentials: Credentials,
                 listeners: Sequence[tuple[str, int]] = (), networks: Sequence[IPNetwork] = ()) -> None:
        self.registry = registry
        self.heartbeats = heartbeats
        self.credentials = credentials
        self.listeners = listeners
        self.networks = networks
        rate = HEARTBEATS_PER_INTERVAL / heartbeats.cfg.heartbeat_interval
        self.beats = Buckets(heartbeats.clock, rate, BURST)
        self.watches = Buckets(heartbeats.clock, rate, BURST)
        # the peer's identity per TLS connection, read once: an agent's connection carries all its renewals
        self._peers: weakref.WeakKeyDictionary[ssl.SSLObject, PeerIdentity | None] = weakref.WeakKeyDictionary()

    def _peer(self, request: web.Request) -> PeerIdentity | None:
        tls = request.transport.get_extra_info("ssl_object") if request.transport else None
        if not isinstance(tls, ssl.SSLObject):
            return peer_identity(tls)
        try:
            return self._peers[tls]
        except KeyError:
            ident = self._peers[tls] = peer_identity(tls)
            return ident

    def node_of(self, request: web.Request) -> PeerIdentity | web.Response:
        ident = self._peer(request)
        if ident is None:
            return _refuse(401, "no verified client certificate")
        if not ident.node_role:
            return _refuse(403, f"certificate for {ident.node_id!r} is not a node certificate (issue one with "
                                "`llmgw ca issue`; the control plane's own certificate is not a node)")
        refused = self.credentials.refusal(ident.node_id, ident.serial)
        if refused:
            return _refuse(403, refused)
        return ident

    async def watch(self, request: web.Request) -> web.Response:
        """GET /v1/agent/watch?seen=DIGEST: answers the digest of the shards this node is to run as soon as it
        differs from `seen`, or after WATCH_HOLD_S with it unchanged (control/nodes/watch.py)."""
        ident = self.node_of(request)
        if isinstance(ident, web.Response):
            return ident
        if not self.watches.take(ident.node_id):
            return _too_often(ident, "watches")
        seen = request.query.get("seen", "")[:64]
        # a hold on a connection, timed like a socket timeout (the event loop's time), not by the plane's clock
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WATCH_HOLD_S
        reg = self.registry
        digest = reg.node_digest(ident.node_id)
        while digest == seen and not reg.watch.closed and (left := deadline - loop.time()) > 0:
            if not await reg.watch.wait(ident.node_id, left):
                break  # the node watches again on another request: this one is answered now
            if self.credentials.refusal(ident.node_id, ident.serial):  # revoked meanwhile: a heartbeat says so
                break
            digest = reg.node_digest(ident.node_id)
        return web.json_response({"digest": digest})

    async def heartbeat(self, request: web.Request) -> web.Response:
        ident = self.node_of(request)
        if isinstance(ident, web.Response):
            return ident
        if not self.beats.take(ident.node_id):
            return _too_often(ident, "heartbeats")
        report = read_report(await request.read())  # by a deadline (net/guards.py)
        if isinstance(report, web.Response):
            return report
        if report.node_id != ident.node_id:
            return _refuse(403, f"certificate is for node {ident.node_id!r}; it may not write node {report.node_id!r}")
        problem = address_problem(report.address, request.remote, ident.ips, self.networks) or ports_problem(
            report.address, report.port_low, report.port_high, self.listeners
        )
        if problem:
            return _refuse(403, f"node {ident.node_id}: {problem}")
        desired = self.heartbeats.heartbeat(report, ident.serial, ident.not_after)
        # answered in the node's own version: an agent older than this control plane (the upgrade order) must be
        # able to read what it is told
        return web.Response(text=answer_in(desired, report.version), content_type="application/json")

    async def renewal(self, request: web.Request) -> web.Response:
        """POST RENEWAL_PATH: a node alive, its report unchanged since the one its token names (wire/renewal.py).
        Answered with its desired state when the one it holds is not current, or SEND_REPORT and why."""
        ident = self.node_of(request)
        if isinstance(ident, web.Response):
            return ident
        if not self.beats.take(ident.node_id):
            return _too_often(ident, "heartbeats")
        if (request.content_length or 0) > MAX_RENEWAL_BYTES:
            return _refuse(413, f"renewal of {request.content_length} bytes is over the limit of "
                                f"{MAX_RENEWAL_BYTES}", max_size=MAX_RENEWAL_BYTES)
        raw = await request.read()  # by a deadline (net/guards.py)
        if len(raw) > MAX_RENEWAL_BYTES:
            return _refuse(413, f"renewal of {len(raw)} bytes is over the limit of {MAX_RENEWAL_BYTES}",
                           max_size=MAX_RENEWAL_BYTES)
        renewal = read_renewal(raw)
        if isinstance(renewal, web.Response):
            return renewal
        if renewal.node_id != ident.node_id:
            return _refuse(403, f"certificate is for node {ident.node_id!r}; it may not renew node "
                                f"{renewal.node_id!r}")
        got = self.heartbeats.renew(renewal, ident.serial, ident.not_after)
        if got.why:
            return _refuse(SEND_REPORT, got.why, report=True)
        return web.Response(text=got.answer, content_type="application/json")


def _too_often(ident: PeerIdentity, what: str) -> web.Response:
    return _refuse(429, f"node {ident.node_id}: {what} too frequent (at most {HEARTBEATS_PER_INTERVAL} per "
                        f"heartbeat interval)")


def read_report(raw: bytes) -> NodeReport | web.Response:
    """A heartbeat's body as a report, or the refusal that says why it is none."""
    return _read(raw, NodeReport, "heartbeat", OLDEST_WIRE_VERSION, lambda v: (
        f"wire version {v} not understood by this control plane (speaks {OLDEST_WIRE_VERSION}-{WIRE_VERSION}): "
        "upgrade control planes before agents"))


def read_renewal(raw: bytes) -> Renewal | web.Response:
    """A renewal's body, or the refusal that says why it is none."""
    return _read(raw, Renewal, "renewal", RENEWAL_WIRE_VERSION, lambda v: (
        f"renewal of wire version {v} not understood by this control plane (takes renewals of "
        f"{RENEWAL_WIRE_VERSION}-{WIRE_VERSION}): send the report whole, or upgrade control planes before agents"))


def _read(raw: bytes, model: type[Body], what: str, oldest: int, words: Callable[[str], str]) -> Body | web.Response:
    """A node's message of `model`, its version checked first: a newer agent's new fields would otherwise read as
    "unknown key", which sends its operator looking for a typo rather than at the upgrade order."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return _refuse(422, f"invalid {what}: not JSON")
    version = data.get("version", WIRE_VERSION) if isinstance(data, dict) else WIRE_VERSION
    if not isinstance(version, int) or not oldest <= version <= WIRE_VERSION:
        return _refuse(422, words(str(version)[:20]), speaks=WIRE_VERSION)
    try:
        return model.model_validate(data)
    except ValidationError as e:
        return _refuse(422, f"invalid {what}", problems=describe(e)[:20])
    except RecursionError:
        return _refuse(422, f"invalid {what}: nested too deeply")


def agent_app(registry: Registry, heartbeats: Heartbeats, credentials: Credentials,
              listeners: Sequence[tuple[str, int]] = (), networks: Sequence[IPNetwork] = ()) -> web.Application:
    door = AgentDoor(registry, heartbeats, credentials, listeners, networks)
    app = web.Application(client_max_size=MAX_HEARTBEAT_BYTES)
    app.router.add_post("/v1/agent/heartbeat", door.heartbeat)
    app.router.add_post(RENEWAL_PATH, door.renewal)
    app.router.add_get("/v1/agent/watch", door.watch)
    return app


def answer_in(desired: DesiredState, version: int) -> str:
    """The desired state in the node's own wire version: an agent older than this control plane (the upgrade order)
    reads strictly and would refuse a whole answer with one field it does not know, so those are left out."""
    desired = desired.model_copy(update={"version": min(version, WIRE_VERSION)})
    older: dict[str, Any] = {"shards": {"__all__": {"weights"}}, "revoked": True} if desired.version < 4 else {}
    if desired.version < 3:
        older["engine_sources"] = True
    elif desired.version < 9:
        desired = desired.model_copy(update={"engine_sources": [_before_9(s) for s in desired.engine_sources]})
        older["engine_sources"] = {"__all__": {"digests_url": True, "digests_unknown": True, "digests_pending": True,
                                               "variants": {"__all__": set(BUILD_NEEDS)}}}
    if 9 <= desired.version < DIGESTS_WIRE_VERSION:  # it reads a release's list itself, as before
        older["engine_sources"] = {"__all__": {"digests_unknown", "digests_pending"}}
    if desired.version < RENEWAL_WIRE_VERSION:
        older.update({"renewal_token": True, "etag": True})
    if desired.version < SERVING_WIRE_VERSION:  # placement sends such an agent no shard that needs them
        shards = older.setdefault("shards", {"__all__": set()})["__all__"]
        shards.update({"sleep", "can_sleep", "sidecars", "adapters"})
    return desired.model_dump_json(exclude=older or None)


BUILD_NEEDS = ("cuda", "glibc", "runtime_url", "runtime_sha256")  # wire version 9: what a build needs of a node


def _before_9(source: EngineSource) -> EngineSource:
    """The builds an agent before wire version 9 can install as they are: a CPU or plain CUDA build with its own
    digest and no runtime companion (it could neither read a release's digest list nor check a driver's version)."""
    kept = [v for v in source.variants if v.variant.split("-")[0] in ("cpu", "cuda") and (not v.url or v.sha256)
            and not v.runtime_url]
    return source.model_copy(update={"variants": kept})
