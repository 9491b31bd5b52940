"""A node with a valid certificate and a user with a key limited to one model cannot make the router write to the
management API: not by naming it as the engine's endpoint, not by answering with a redirect to it, and not by
offering the control plane's own port as one of its engine ports."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from llmgw.dev.cluster import NodePlan, admin_get, admin_post
from tests.harness import InProcessServer, await_until, plan
from tests.integration.forger import HostileNode

MODEL = {"name": "m", "source": "org/m", "engine": "sim", "profile": {"gpus_per_shard": 1},
         "scaling": {"min": 1, "max": 1}}
PORTS = (27100, 27199)


async def placed_shard(n: HostileNode) -> dict[str, Any]:
    async def desired() -> Any:
        status, body = await n.heartbeat()
        assert status == 200, body
        return body["shards"][0] if body["shards"] else None

    return await await_until(desired, 15, "a shard placed on the hostile node")  # type: ignore[no-any-return]


async def ready_as(n: HostileNode, shard: dict[str, Any], endpoint: str) -> None:
    state = {"replica_id": shard["replica_id"], "rank": 0, "state": "ready", "endpoint": endpoint, "pid": 4242}

    async def ready() -> bool:
        assert (await n.heartbeat([state]))[0] == 200
        rows = await asyncio.to_thread(admin_get, n.p, "/api/status")
        return any(r["state"] == "ready" for r in rows["replicas"])

    await await_until(ready, 15, "the replica reported ready")


async def attack(p: Any, key: str, name: str) -> tuple[int, str]:
    """What the user sends: a chat request whose body would also make a valid key-creation request."""
    body = {"model": "m", "name": name, "models": [], "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession() as s, s.post(
        p.api + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
    ) as r:
        return r.status, await r.text()


def keys_named(p: Any, name: str) -> list[Any]:
    return [k for k in admin_get(p, "/api/keys") if k["name"] == name]


async def test_a_forged_endpoint_never_reaches_the_management_api(tmp_path: Path) -> None:
    p = plan(tmp_path, [NodePlan(id="evil01", address="127.0.0.1")], [MODEL], reconcile_interval="0.1s")
    async with InProcessServer(p):
        n = HostileNode(p, "evil01", "127.0.0.1", PORTS)
        shard = await placed_shard(n)
        await ready_as(n, shard, f"{p.admin}/api/keys?via=")  # + "/v1/chat/completions" lands in the query
        key = (await asyncio.to_thread(admin_post, p, "/api/keys", {"name": "user", "models": ["m"]}))["key"]
        status, text = await attack(p, key, "forged")
        assert await asyncio.to_thread(keys_named, p, "forged") == []
        assert "llmgw-" not in text and status >= 500, (status, text)


async def test_a_redirect_from_an_engine_is_never_followed(tmp_path: Path) -> None:
    p = plan(tmp_path, [NodePlan(id="evil01", address="127.0.0.1")], [MODEL], reconcile_interval="0.1s")
    async with InProcessServer(p):
        n = HostileNode(p, "evil01", "127.0.0.1", PORTS)
        shard = await placed_shard(n)

        async def redirect(_: web.Request) -> web.Response:
            raise web.HTTPTemporaryRedirect(f"{p.admin}/api/keys")

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", redirect)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", shard["serve_port"]).start()
        try:
            await ready_as(n, shard, f"http://127.0.0.1:{shard['serve_port']}")
            key = (await asyncio.to_thread(admin_post, p, "/api/keys", {"name": "user", "models": ["m"]}))["key"]
            status, text = await attack(p, key, "redirected")
            assert await asyncio.to_thread(keys_named, p, "redirected") == []
            assert status == 502 and "llmgw-" not in text, (status, text)
            assert json.loads(text)["error"]["code"] == "upstream_error"
        finally:
            await runner.cleanup()


async def test_a_node_may_not_offer_the_control_planes_own_ports_or_anothers_address(tmp_path: Path) -> None:
    p = plan(tmp_path, [NodePlan(id="evil01", address="127.0.0.1")], [MODEL], reconcile_interval="0.1s")
    async with InProcessServer(p):
        n = HostileNode(p, "evil01", "127.0.0.1", (p.admin_port, p.admin_port))
        status, body = await n.heartbeat()
        assert status == 403 and "control plane's own listener" in body["error"], body
        n = HostileNode(p, "evil01", "10.9.8.7", PORTS)  # not where it reports from, not in its certificate
        status, body = await n.heartbeat()
        assert status == 403 and "is not this node's" in body["error"], body
        assert await asyncio.to_thread(admin_get, p, "/api/nodes") == []
