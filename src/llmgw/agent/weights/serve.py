"""The weights a node holds, served to the other nodes of its cluster so that a fabric downloads a file once.

Mutual TLS with the nodes' own certificates: only a client whose certificate our CA issued as a node certificate,
and that the control plane has not revoked (its list comes with every desired state), gets a byte. Only whole
fetched files are served (never a `.part`, never anything named by a path), looked up by the URL they came from;
Range requests are answered, so a copier that lost its connection resumes.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from llmgw.agent.weights import local
from llmgw.control.listeners import Limiter, Listener, refusal, start_listener
from llmgw.pki.tls import PeerIdentity, peer_identity

log = logging.getLogger(__name__)

PEER_CONNECTIONS = 64
PEER_CONNECTIONS_PER_CLIENT = 8
HEADER_TIMEOUT = 10.0
DIGEST_HEADER = "X-Llmgw-Sha256"


Refused = Callable[[PeerIdentity], bool]  # a node (or certificate) the control plane has revoked


def peer_app(weights_dir: Path, refused: Refused) -> web.Application:
    async def weights(request: web.Request) -> web.StreamResponse:
        ident = peer_identity(request.transport.get_extra_info("ssl_object") if request.transport else None)
        if ident is None or not ident.node_role:
            return web.json_response({"error": "only nodes of this cluster may copy weights"}, status=403)
        if refused(ident):
            log.warning("weights: refused node %s (certificate %s): revoked", ident.node_id, ident.serial)
            return web.json_response({"error": f"node {ident.node_id} is revoked"}, status=403)
        url = request.query.get("source", "")
        if not local.is_remote(url) or len(url) > 2048:
            return web.json_response({"error": "source must be the http(s) URL the file was fetched from"},
                                     status=400)
        held = local.read_held(local.folder_for(weights_dir, url))
        if held is None or held.url != url:
            return web.json_response({"error": "this node does not hold that file whole"}, status=404)
        log.info("weights: serving %s to node %s (%s)", held.path.name, ident.node_id,
                 request.headers.get("Range", "whole"))
        return web.FileResponse(held.path, headers={DIGEST_HEADER: held.sha256} if held.sha256 else None)

    app = web.Application(client_max_size=4096)
    app.router.add_get("/v1/weights", weights)
    return app


async def start_peer_listener(weights_dir: Path, host: str, port: int, tls: ssl.SSLContext,
                              refused: Refused = lambda _: False) -> Listener:
    plain = refusal(b'{"error": "too many connections"}')
    limiter = Limiter("weights", PEER_CONNECTIONS, PEER_CONNECTIONS_PER_CLIENT, plain)
    listen = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return await start_listener(peer_app(weights_dir, refused), listen, limiter, HEADER_TIMEOUT, tls=tls)
