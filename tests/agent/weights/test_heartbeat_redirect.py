"""The heartbeat stays on mutual TLS with the control plane: it follows no redirect elsewhere."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp import web

from llmgw.agent.client import ControlPlaneClient
from llmgw.core.errors import UpstreamError
from llmgw.wire.messages import DesiredState, Hardware, NodeReport
from tests.agent.weights.kit import Pki
from tests.harness import free_port


async def _site(app: web.Application, **kw: object) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port, **kw).start()  # type: ignore[arg-type]
    return runner, port


async def test_the_heartbeat_does_not_follow_a_redirect_off_mutual_tls(pki: Pki, tmp_path: Path) -> None:
    """The certificate vouches for the first hop only, so a 307 from the control plane's address (a mis-set proxy is
    enough) is not followed: the report would go out in clear and the desired state come from a server that proved
    nothing."""
    seen: list[bytes] = []

    async def plain(request: web.Request) -> web.Response:
        seen.append(await request.read())
        return web.Response(text=DesiredState(node_id="node01", revoked=[]).model_dump_json(),
                            content_type="application/json")

    plain_app = web.Application()
    plain_app.router.add_post("/v1/agent/heartbeat", plain)
    plain_runner, plain_port = await _site(plain_app)

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPTemporaryRedirect(f"http://127.0.0.1:{plain_port}/v1/agent/heartbeat")

    cp_app = web.Application()
    cp_app.router.add_post("/v1/agent/heartbeat", redirect)
    cp_runner, cp_port = await _site(cp_app, ssl_context=pki.server("controlplane", require_client=False))
    c = ControlPlaneClient([f"https://127.0.0.1:{cp_port}"], lambda: pki.client("node01"), 5.0)
    try:
        with pytest.raises(UpstreamError):
            await c.heartbeat(NodeReport(node_id="node01", address="127.0.0.1", hardware=Hardware()))
    finally:
        await c.close()
        await cp_runner.cleanup()
        await plain_runner.cleanup()
    assert not seen, "the node report was sent over plain HTTP"
