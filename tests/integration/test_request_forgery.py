"""A node with a valid certificate and a user with a one-model key cannot make the router reach the management API:
not as an engine endpoint, a redirect or an engine port. Each rule is also held against a tokenless loopback
bystander, since the management API's token would refuse the request anyway."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from llmgw.dev.cluster import NodePlan, admin_get, admin_post
from tests.harness import InProcessServer, await_until, free_port, plan
from tests.integration.forger import HostileNode

MODEL = {"name": "m", "source": "org/m", "engine": "sim", "profile": {"gpus_per_shard": 1},
         "scaling": {"min": 1, "max": 1}}


def ports() -> tuple[int, int]:
    """The hostile node's engine port range: two ports (a leader takes two) from this run's own, so the engine port a
    test plays is free to bind; the first is the one assigned."""
    while True:
        port = free_port()
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port, port + 1


class Listening:
    """An HTTP service on loopback, answering every request with `handler`; `hits` are the paths it was sent."""

    def __init__(self, handler: Any, port: int | None = None) -> None:
        self.handler, self.port, self.hits = handler, port or free_port(), list[str]()
        self.url = f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> Listening:
        async def record(r: web.Request) -> web.StreamResponse:
            self.hits.append(r.path_qs)
            return await self.handler(r)  # type: ignore[no-any-return]

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", record)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.runner.cleanup()


async def answers_like_an_engine(_: web.Request) -> web.Response:
    """A bystander on loopback that needs no token: had the router reached it, the user would get its answer."""
    return web.json_response({"id": "bystander", "object": "chat.completion", "choices": [],
                              "usage": {"prompt_tokens": 1, "completion_tokens": 1}})


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
        n = HostileNode(p, "evil01", "127.0.0.1", ports())
        shard = await placed_shard(n)
        await ready_as(n, shard, f"{p.admin}/api/keys?via=")  # + "/v1/chat/completions" lands in the query
        key = (await asyncio.to_thread(admin_post, p, "/api/keys", {"name": "user", "models": ["m"]}))["key"]
        status, text = await attack(p, key, "forged")
        assert await asyncio.to_thread(keys_named, p, "forged") == []
        assert "llmgw-" not in text and status >= 500, (status, text)


async def test_a_redirect_from_an_engine_is_never_followed(tmp_path: Path) -> None:
    p = plan(tmp_path, [NodePlan(id="evil01", address="127.0.0.1")], [MODEL], reconcile_interval="0.1s")
    async with InProcessServer(p):
        n = HostileNode(p, "evil01", "127.0.0.1", ports())
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
        n = HostileNode(p, "evil01", "10.9.8.7", ports())  # not where it reports from, not in its certificate
        status, body = await n.heartbeat()
        assert status == 403 and "is not this node's" in body["error"], body
        assert await asyncio.to_thread(admin_get, p, "/api/nodes") == []


async def attacked_through(tmp_path: Path, engine: Any, endpoint: Any = None) -> tuple[int, str, list[str]]:
    """A hostile node whose engine port answers with `engine` (None: nothing listens there) and whose reported
    endpoint is `endpoint(bystander_url, engine_url)`; a user's chat request is sent. Returns the answer and the
    paths the bystander was sent."""
    p = plan(tmp_path, [NodePlan(id="evil01", address="127.0.0.1")], [MODEL], reconcile_interval="0.1s")
    async with InProcessServer(p), Listening(answers_like_an_engine) as bystander:
        n = HostileNode(p, "evil01", "127.0.0.1", ports())
        shard = await placed_shard(n)
        own = f"http://127.0.0.1:{shard['serve_port']}"
        key = (await asyncio.to_thread(admin_post, p, "/api/keys", {"name": "user", "models": ["m"]}))["key"]
        if engine is None:
            await ready_as(n, shard, endpoint(bystander.url, own) if endpoint else own)
            status, text = await attack(p, key, "x")
        else:
            async with Listening(lambda r: engine(r, bystander.url), shard["serve_port"]):
                await ready_as(n, shard, endpoint(bystander.url, own) if endpoint else own)
                status, text = await attack(p, key, "x")
        return status, text, bystander.hits


async def test_a_reported_endpoint_is_never_where_the_router_sends(tmp_path: Path) -> None:
    """The node reports a loopback service that needs no token as its engine; nothing listens on the port it was
    given. The router sends only to the address and port the control plane assigned."""
    status, text, hits = await attacked_through(tmp_path, None, lambda bystander, _: bystander)
    assert hits == [], hits
    assert status >= 500 and "bystander" not in text, (status, text)


async def test_an_engines_redirect_is_never_followed_nor_relayed(tmp_path: Path) -> None:
    """A 307 in JSON, pointing at the bystander: not followed (the bystander sees nothing), and not passed on as an
    answer either (the client gets 502, not the engine's 3xx)."""
    async def redirect(_: web.Request, bystander: str) -> web.Response:
        return web.Response(status=307, headers={"Location": bystander + "/v1/chat/completions"},
                            content_type="application/json", text='{"moved": true}')

    status, text, hits = await attacked_through(tmp_path, redirect)
    assert hits == [], hits
    assert status == 502, (status, text)
    assert json.loads(text)["error"]["code"] == "upstream_error" and "redirect" in text, text


async def test_an_answer_that_is_not_json_or_an_event_stream_is_not_relayed(tmp_path: Path) -> None:
    """A page of another type (what a management UI, a metrics page or a cloud metadata service answers) is not an
    engine's answer: the client gets 502 and none of the page."""
    async def page(_: web.Request, bystander: str) -> web.Response:
        return web.Response(status=200, content_type="text/html", text="<html>operator console: token=s3cret</html>")

    status, text, _ = await attacked_through(tmp_path, page)
    assert status == 502 and "s3cret" not in text, (status, text)
    assert "text/html" in json.loads(text)["error"]["message"], text
