"""The weights a node holds, served to the other nodes of its cluster so that a fabric downloads a file once.
Only a node certificate of our CA that the control plane has not revoked gets a byte, and only whole fetched files
are served, looked up by the URL they came from (never a path); Range requests are answered."""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from llmgw.agent.weights import local
from llmgw.net.listeners import Limiter, Listener, refusal, start_listener
from llmgw.pki.tls import PeerIdentity, peer_identity
from llmgw.wire.messages import is_remote

log = logging.getLogger(__name__)

PEER_CONNECTIONS = 64
PEER_CONNECTIONS_PER_CLIENT = 8
HEADER_TIMEOUT = 10.0
DIGEST_HEADER = "X-Llmgw-Sha256"
CHUNK = 1 << 20
_OPEN_RANGE = re.compile(r"bytes=(\d{1,19})-")


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
        if not is_remote(url) or len(url) > 2048:
            return web.json_response({"error": "source must be the http(s) URL the file was fetched from"},
                                     status=400)
        held = local.read_held(local.folder_for(weights_dir, url))
        if held is None or held.url != url:
            return web.json_response({"error": "this node does not hold that file whole"}, status=404)
        log.info("weights: serving %s to node %s (%s)", held.path.name, ident.node_id,
                 request.headers.get("Range", "whole"))
        return await _send(request, held, ident, refused)

    app = web.Application(client_max_size=4096)
    app.router.add_get("/v1/weights", weights)
    return app


async def _send(request: web.Request, held: local.Held, ident: PeerIdentity, refused: Refused) -> web.StreamResponse:
    """The file from where the copier asks (`Range: bytes=N-`, the only form a copier sends), a chunk at a time,
    asking before each whether the copier has been revoked since it began: a node revoked mid-copy gets no more."""
    start, size = 0, held.size
    m = _OPEN_RANGE.fullmatch(request.headers.get("Range", ""))
    if m is not None:
        start = int(m.group(1))
        if start >= size:
            return web.Response(status=416, headers={"Content-Range": f"bytes */{size}"})
    headers = {"Content-Length": str(size - start), "Content-Type": "application/octet-stream"}
    if m is not None:
        headers["Content-Range"] = f"bytes {start}-{size - 1}/{size}"
    if held.sha256:
        headers[DIGEST_HEADER] = held.sha256
    resp = web.StreamResponse(status=206 if m is not None else 200, headers=headers)
    await resp.prepare(request)
    with held.path.open("rb") as f:
        f.seek(start)
        left = size - start
        while left > 0 and (chunk := await asyncio.to_thread(f.read, min(CHUNK, left))):
            if refused(ident):
                log.warning("weights: stopped serving %s to node %s: revoked", held.path.name, ident.node_id)
                if request.transport is not None:
                    request.transport.close()
                return resp
            await resp.write(chunk)
            left -= len(chunk)
    await resp.write_eof()
    return resp


async def start_peer_listener(weights_dir: Path, host: str, port: int, tls: ssl.SSLContext,
                              refused: Refused = lambda _: False) -> Listener:
    plain = refusal(b'{"error": "too many connections"}')
    limiter = Limiter("weights", PEER_CONNECTIONS, PEER_CONNECTIONS_PER_CLIENT, plain)
    listen = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return await start_listener(peer_app(weights_dir, refused), listen, limiter, HEADER_TIMEOUT, tls=tls)
