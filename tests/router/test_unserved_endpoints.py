"""An engine that has no such endpoint (llama-server asked for embeddings it was not started for) is the request's
fault: the replica stays in rotation however often a client asks, the path is remembered as not served and answered
404 `unsupported_endpoint` without being sent again, and chat is served throughout. Against real llama-server, and
against engines served by the test (two replicas; how often each is asked)."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import openai
import pytest
from aiohttp import web

from llmgw.config.server import RouterConfig, ServerConfig, TLSFiles
from llmgw.core.clock import FakeClock
from llmgw.router.table import EJECT_AFTER, UNSERVED_S
from llmgw.store.sqlite import SqliteStore
from tests.harness import free_port
from tests.router.conftest import RouterUnderTest, models, serving
from tests.router.fakes import FakeState

CHAT = {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4}


def engine(embeddings_status: int, hits: Counter[str]) -> web.Application:
    """Chat, and an embeddings path answered `embeddings_status` (llama-server's 501 without --embeddings)."""

    async def chat(request: web.Request) -> web.Response:
        hits[request.path] += 1
        return web.json_response({"id": "c", "object": "chat.completion", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}})

    async def embeddings(request: web.Request) -> web.Response:
        hits[request.path] += 1
        # llama-server's words: "File Not Found" for a path it has no route for (a 404 naming something of the
        # request is passed on instead: test_an_engines_404_about_the_request_passes_through.py)
        said = "File Not Found" if embeddings_status == 404 else "not supported"
        return web.json_response({"error": {"code": embeddings_status, "message": said}}, status=embeddings_status)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/embeddings", embeddings)
    return app


@contextlib.asynccontextmanager
async def two_replicas(tmp_path: Path, embeddings_status: int) -> AsyncIterator[tuple[str, str, FakeState,
                                                                                      FakeClock, Counter[str]]]:
    """The router over two replicas of sim-a, both on one engine served here: (url, key, state, its clock, hits per
    path)."""
    hits: Counter[str] = Counter()
    runner = web.AppRunner(engine(embeddings_status, hits))
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    cfg = ServerConfig(tls=TLSFiles(ca="x", cert="x", key="x"), models=models(), router=RouterConfig())
    store = SqliteStore(tmp_path / "llmgw.db").open()
    clock = FakeClock()
    state = FakeState(cfg.models, clock, store)
    for rid in ("sim-a-1", "sim-a-2"):
        state.put_ready(rid, "sim-a", f"http://127.0.0.1:{port}")
    try:
        async with serving(state, store, cfg, "t") as (url, _, key):
            yield url, key, state, clock, hits
    finally:
        await runner.cleanup()
        store.close()


async def post(url: str, key: str, path: str, body: dict[str, object]) -> tuple[int, str]:
    async with aiohttp.ClientSession() as s, s.post(url + path, json={"model": "sim-a", **body},
                                                    headers={"Authorization": f"Bearer {key}"}) as r:
        got = await r.json()
        return r.status, got["error"]["code"] if r.status != 200 else ""


async def test_a_501_is_remembered_per_replica_and_never_ejects_one(tmp_path: Path) -> None:
    async with two_replicas(tmp_path, 501) as (url, key, state, clock, hits):
        for n in range(1, EJECT_AFTER + 1):  # a 501 from each replica EJECT_AFTER times in a row: no failure
            for _ in range(2 * EJECT_AFTER):
                assert await post(url, key, "/v1/embeddings", {"input": "x"}) == (404, "unsupported_endpoint")
            assert hits["/v1/embeddings"] == 2 * n  # once per replica: then answered without sending
            clock.advance(UNSERVED_S + 1)  # asked again after a while (an engine restarted with other flags)
        assert state.ejections == []
        for _ in range(4):
            assert await post(url, key, "/v1/chat/completions", CHAT) == (200, "")
        assert hits["/v1/chat/completions"] == 4


async def test_a_404_is_never_remembered_nor_counted_against_the_replica(tmp_path: Path) -> None:
    """Engines answer 404 for what a request names too (a stored response, a model): one client must not be able
    to close a path for everyone with it."""
    async with two_replicas(tmp_path, 404) as (url, key, state, _, hits):
        for _ in range(2 * EJECT_AFTER):
            assert await post(url, key, "/v1/embeddings", {"input": "x"}) == (404, "unsupported_endpoint")
        assert hits["/v1/embeddings"] == 2 * EJECT_AFTER and state.ejections == []


@pytest.mark.usefixtures("llama")
async def test_embeddings_asked_of_llama_server_over_and_over_leave_it_serving_chat(rut: RouterUnderTest) -> None:
    client = openai.AsyncOpenAI(base_url=rut.url + "/v1", api_key=rut.key, max_retries=0)
    for i in range(8 * EJECT_AFTER):  # a burst first, then alternating with chat
        with pytest.raises(openai.NotFoundError, match="does not serve /v1/embeddings"):
            await client.embeddings.create(model="smollm2", input="hello")
        if i < 4 * EJECT_AFTER:
            continue
        done = await client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "Hi."}],
                                                    max_tokens=4)
        assert done.choices[0].message.content is not None
    assert rut.state.ejections == []
    (route,) = rut.router.table.routes["smollm2"]
    assert route.ejected_until == 0.0 and route.failures == 0
    assert not route.serves("/v1/embeddings", rut.clock.monotonic())  # learnt from the engine's own 501
