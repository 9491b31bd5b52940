"""The agent fails over among control planes; a refusal is an answer, not a reason to try elsewhere."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp import web
from bench.addresses import loopback

from llmgw.agent.client import ControlPlaneClient
from llmgw.core.errors import UpstreamError
from llmgw.dev.cluster import ClusterPlan, NodePlan
from llmgw.pki.tls import client_context
from llmgw.wire.messages import WIRE_VERSION, DesiredState, Hardware, NodeReport
from tests.agent.weights.kit import Pki, make_pki
from tests.harness import InProcessServer, free_port, plan

HOST_A, HOST_B = loopback(), loopback()  # the addresses this module's tests name (bench/addresses.py)


def _client(p: ClusterPlan, node: str, urls: list[str]) -> ControlPlaneClient:
    pki = p.workdir / "pki"
    crt, key = pki / f"{node}.crt", pki / f"{node}.key"
    return ControlPlaneClient(urls, lambda: client_context(crt, key, pki / "ca.crt"), 3.0)


async def test_fails_over_to_the_next_control_plane_and_stays_there(tmp_path: Path) -> None:
    p = plan(tmp_path, [NodePlan(id="node01", address=HOST_A)], [])
    dead = f"https://127.0.0.1:{free_port()}"
    live = f"https://127.0.0.1:{p.agent_port}"
    c = _client(p, "node01", [dead, live])
    report = NodeReport(node_id="node01", address=HOST_A, hardware=Hardware())
    async with InProcessServer(p):
        try:
            desired = await c.heartbeat(report)
            assert desired.node_id == "node01"
            assert c.current == 1  # the next heartbeat starts with the one that answered
            await c.heartbeat(report)
            assert c.current == 1
        finally:
            await c.close()


async def test_no_control_plane_answering_names_every_address(tmp_path: Path) -> None:
    p = plan(tmp_path, [NodePlan(id="node01", address=HOST_A)], [])
    urls = [f"https://127.0.0.1:{free_port()}", f"https://127.0.0.1:{free_port()}"]
    c = _client(p, "node01", urls)
    try:
        with pytest.raises(UpstreamError) as e:
            await c.heartbeat(NodeReport(node_id="node01", address=HOST_A, hardware=Hardware()))
        assert all(u in str(e.value) for u in urls)
    finally:
        await c.close()


async def test_a_refusal_is_not_failed_over(tmp_path: Path) -> None:
    p = plan(tmp_path, [NodePlan(id="node01", address=HOST_A), NodePlan(id="node02", address=HOST_B)],
             [])
    c = _client(p, "node01", [f"https://127.0.0.1:{p.agent_port}", f"https://127.0.0.1:{free_port()}"])
    async with InProcessServer(p):
        try:
            with pytest.raises(UpstreamError) as e:
                await c.heartbeat(NodeReport(node_id="node02", address=HOST_B, hardware=Hardware()))
            assert "403" in str(e.value) and c.current == 0
        finally:
            await c.close()


async def test_a_desired_state_of_another_wire_version_is_named_as_such(tmp_path: Path) -> None:
    """A control plane speaking a newer wire version: the agent says so, rather than "unreadable"."""
    from aiohttp import web

    from llmgw.pki.tls import server_context

    async def newer(_: web.Request) -> web.Response:
        return web.json_response({"version": WIRE_VERSION + 1, "node_id": "node01", "shards": [], "a_new_field": True})

    p = plan(tmp_path, [NodePlan(id="node01", address=HOST_A)], [])
    app = web.Application()
    app.router.add_post("/v1/agent/heartbeat", newer)
    pki = p.workdir / "pki"
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    tls = server_context(pki / "controlplane.crt", pki / "controlplane.key", pki / "ca.crt", require_client=True)
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=tls).start()
    c = _client(p, "node01", [f"https://127.0.0.1:{port}"])
    try:
        with pytest.raises(UpstreamError) as e:
            await c.heartbeat(NodeReport(node_id="node01", address=HOST_A, hardware=Hardware()))
        assert (f"desired state wire version {WIRE_VERSION + 1} not understood by this agent (speaks {WIRE_VERSION})"
                in str(e.value))
    finally:
        await c.close()
        await runner.cleanup()


@pytest.fixture
def node_pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path / "node-pki")


async def _impostor(node_pki: Pki, pad: int) -> tuple[web.AppRunner, int]:
    body = DesiredState(node_id="node01").model_dump_json()
    body = body[:-1] + " " * pad + "}"

    async def heartbeat(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(text=body, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/agent/heartbeat", heartbeat)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    # node02's own certificate: a node certificate now carries serverAuth, and an IP SAN of 127.0.0.1
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=node_pki.server("node02", require_client=False)).start()
    return runner, port


@pytest.mark.parametrize("pad", [0, 2_000_000], ids=["small-answer", "large-answer"])
async def test_a_node_certificate_never_passes_for_the_control_plane(node_pki: Pki, pad: int) -> None:
    """The answering certificate is checked even on a small answer, whose connection aiohttp releases (and sets to
    None) as soon as the whole body has arrived with the headers."""
    runner, port = await _impostor(node_pki, pad)
    c = ControlPlaneClient([f"https://127.0.0.1:{port}"], lambda: node_pki.client("node01"), 5.0)
    try:
        with pytest.raises(UpstreamError):
            got = await c.heartbeat(NodeReport(node_id="node01", address="127.0.0.1", hardware=Hardware()))
            print("accepted a desired state from node02:", got.node_id)
    finally:
        await c.close()
        await runner.cleanup()
