"""The OpenAI surface beyond chat: models.retrieve with the official client, the Responses API passed through to an
engine that serves it, an endpoint an engine does not serve answered 4xx (never the engine's 5xx, which clients
retry), and a 503 that says whether a model is loading or should be serving and is not."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import openai
import pytest
from aiohttp import web

from tests.router.conftest import RouterUnderTest, router_over


def client(url: str, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key=key, max_retries=0)


async def test_models_retrieve_with_the_official_client(rut: RouterUnderTest) -> None:
    m = await client(rut.url, rut.key).models.retrieve("sim-a")
    assert (m.id, m.object) == ("sim-a", "model")
    for missing in ("no-such-model", "sim-off"):  # unknown, and configured but off: neither is listed either
        with pytest.raises(openai.NotFoundError):
            await client(rut.url, rut.key).models.retrieve(missing)
    with pytest.raises(openai.AuthenticationError):
        await client(rut.url, "wrong").models.retrieve("sim-a")


def responses_engine() -> web.Application:
    async def responses(request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"id": "resp_1", "object": "response", "model": body["model"], "status": "completed",
                                  "output": [{"type": "message", "id": "msg_1", "role": "assistant", "status":
                                              "completed", "content": [{"type": "output_text", "text": "hello",
                                                                        "annotations": []}]}],
                                  "usage": {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4}})

    app = web.Application()
    app.router.add_post("/v1/responses", responses)
    return app


async def test_the_responses_api_reaches_an_engine_that_serves_it(tmp_path: Path) -> None:
    async with router_over(tmp_path, responses_engine()) as b:
        r = await client(b.url, b.key).responses.create(model="sim-a", input="hi")
        assert r.output_text == "hello"
        # an endpoint this engine does not have: the client's 404, naming the path and the model
        async with aiohttp.ClientSession() as s, s.post(
            b.url + "/v1/embeddings", json={"model": "sim-a", "input": "x"},
            headers={"Authorization": f"Bearer {b.key}"},
        ) as resp:
            err = (await resp.json())["error"]
            assert resp.status == 404 and err["code"] == "unsupported_endpoint"
            assert "sim-a" in err["message"] and "/v1/embeddings" in err["message"]


@pytest.mark.usefixtures("llama")
async def test_embeddings_on_an_engine_without_them_is_a_4xx_the_client_does_not_retry(rut: RouterUnderTest) -> None:
    """llama-server started without --embeddings answers 501; the official client retried that as a server error."""
    with pytest.raises(openai.NotFoundError, match="does not serve /v1/embeddings"):
        await client(rut.url, rut.key).embeddings.create(model="smollm2", input="hello")


async def test_a_model_that_should_serve_and_has_no_replica_is_not_said_to_be_loading(rut: RouterUnderTest) -> None:
    rut.state.remove("sim-a-1")  # min 1, its only replica gone: nothing is loading

    async def time_passes() -> None:  # the injected clock moves past load_wait (else the real-time cap, 10 s, ends it)
        while True:
            await asyncio.sleep(0.05)
            rut.clock.advance(0.1)

    ticking = asyncio.create_task(time_passes())
    try:
        async with aiohttp.ClientSession() as s, s.post(
            rut.url + "/v1/chat/completions", json={"model": "sim-a", "messages": [{"role": "user", "content": "x"}]},
            headers={"Authorization": f"Bearer {rut.key}"},
        ) as resp:
            err = (await resp.json())["error"]
    finally:
        ticking.cancel()
    assert resp.status == 503 and err["code"] == "no_ready_replica", err
    assert resp.headers["Retry-After"]
