"""Anthropic's Messages API and OpenAI's Responses API through the router to a real llama-server, which serves both,
streamed and not, with usage recorded; and the key as Anthropic's clients send it (`x-api-key`), checked as a bearer
key is, on every path."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import aiohttp
import openai
import pytest

from llmgw.router.keys import new_key
from tests.router.conftest import RouterUnderTest, settle

ANTHROPIC = {"anthropic-version": "2023-06-01"}
MESSAGE = {"model": "smollm2", "max_tokens": 8, "messages": [{"role": "user", "content": "Say hello."}]}


async def messages(rut: RouterUnderTest, headers: dict[str, str], body: dict[str, Any] | None = None
                   ) -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as s, s.post(rut.url + "/v1/messages", json=body or MESSAGE,
                                                    headers={**ANTHROPIC, **headers}) as r:
        return r.status, await r.read()


def recorded(rut: RouterUnderTest) -> list[tuple[str, int, int, int]]:
    """(model, status, prompt tokens, completion tokens) of each request recorded, in order."""
    with sqlite3.connect(rut.db) as db:
        rows: list[tuple[str, int, int, int]] = db.execute(
            "SELECT model, status, prompt_tokens, completion_tokens FROM usage ORDER BY seq").fetchall()
    return rows


async def test_x_api_key_is_a_key_as_a_bearer_is(rut: RouterUnderTest) -> None:
    async with aiohttp.ClientSession() as s:
        async with s.get(rut.url + "/v1/models", headers={"x-api-key": rut.key}) as r:
            assert r.status == 200 and {"sim-a", "sim-b"} <= {m["id"] for m in (await r.json())["data"]}
        body = {"model": "sim-a", "messages": [{"role": "user", "content": "hi"}]}
        async with s.post(rut.url + "/v1/chat/completions", json=body, headers={"x-api-key": rut.key}) as r:
            assert r.status == 200
        for headers, code in (({"x-api-key": "llmgw-wrong"}, "invalid_api_key"), ({"x-api-key": ""}, "invalid_api_key"),
                              ({}, "missing_api_key"),
                              # the bearer header wins: a wrong one is not made good by a right x-api-key
                              ({"Authorization": "Bearer llmgw-wrong", "x-api-key": rut.key}, "invalid_api_key")):
            async with s.post(rut.url + "/v1/messages", json={**MESSAGE, "model": "sim-a"}, headers=headers) as r:
                got = await r.json()
                assert r.status == 401 and got == {"type": "error", "error": {  # Anthropic's envelope, on its path
                    "type": "authentication_error", "message": got["error"]["message"], "code": code}}, headers
        # revoked: refused whichever header carries it
        rec = rut.router.keys.check(rut.key)
        assert rec is not None
        raw, other = new_key("other", [], rut.clock)
        rut.store.put_key(other)
        rut.store.put_key(rec.model_copy(update={"revoked_at": rut.clock.now()}))
        rut.router.keys.reload()
        async with s.post(rut.url + "/v1/chat/completions", json=body, headers={"x-api-key": rut.key}) as r:
            assert r.status == 401
        async with s.post(rut.url + "/v1/chat/completions", json=body, headers={"x-api-key": raw}) as r:
            assert r.status == 200


async def test_errors_on_the_messages_path_are_in_anthropics_envelope(rut: RouterUnderTest) -> None:
    async with aiohttp.ClientSession() as s:
        for body, status, kind in (({**MESSAGE, "model": "no-such-model"}, 404, "not_found_error"),
                                   ({"messages": []}, 400, "invalid_request_error")):
            async with s.post(rut.url + "/v1/messages", json=body, headers={"x-api-key": rut.key}) as r:
                got = await r.json()
                assert r.status == status and got["type"] == "error" and got["error"]["type"] == kind, got
                assert got["error"]["message"]
        async with s.get(rut.url + "/v1/messages", headers={"x-api-key": rut.key}) as r:  # aiohttp's own refusal
            assert r.status == 405 and (await r.json())["error"]["type"] == "invalid_request_error"
        async with s.post(rut.url + "/v1/chat/completions", json={"messages": []},
                          headers={"x-api-key": rut.key}) as r:  # the OpenAI paths keep OpenAI's
            assert r.status == 400 and set((await r.json())["error"]) == {"message", "type", "param", "code"}


@pytest.mark.usefixtures("llama")
async def test_messages_reach_llama_server_with_an_anthropic_key_header(rut: RouterUnderTest) -> None:
    status, body = await messages(rut, {"x-api-key": rut.key})
    assert status == 200, body
    answer = json.loads(body)
    assert answer["type"] == "message" and answer["role"] == "assistant"
    assert any(c["type"] == "text" and c["text"] for c in answer["content"]), answer
    status, body = await messages(rut, {"x-api-key": rut.key}, {**MESSAGE, "stream": True})
    assert status == 200, body
    events = [e.split("\n") for e in body.decode().strip().split("\n\n")]  # each: its event line, its data line
    assert all(len(e) == 2 and e[0].startswith("event: ") and e[1].startswith("data: {") for e in events), events
    order = [e[0][7:] for e in events]
    kinds = {e[0][7:]: json.loads(e[1][6:]) for e in events}  # the last of each kind
    assert order[0] == "message_start" and order[-1] == "message_stop", body
    assert "content_block_delta" in kinds
    assert kinds["message_delta"]["usage"]["output_tokens"] > 0  # Anthropic's streams always say their usage
    await settle(rut)
    seen = [r for r in recorded(rut) if r[0] == "smollm2"]
    assert [r[1] for r in seen] == [200, 200]
    assert all(p > 0 and c > 0 for _, _, p, c in seen), seen  # Anthropic's input/output tokens, streamed or not


@pytest.mark.usefixtures("llama")
async def test_the_responses_api_reaches_llama_server(rut: RouterUnderTest) -> None:
    client = openai.AsyncOpenAI(base_url=rut.url + "/v1", api_key=rut.key, max_retries=0)
    r = await client.responses.create(model="smollm2", input="Say hello.", max_output_tokens=8)
    assert r.output_text
    stream = await client.responses.create(model="smollm2", input="Say hello.", max_output_tokens=8, stream=True)
    kinds = [event.type async for event in stream]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed", kinds
    assert "response.output_text.delta" in kinds
    await settle(rut)
    seen = [r for r in recorded(rut) if r[0] == "smollm2"]
    assert [r[1] for r in seen] == [200, 200]
    assert all(p > 0 and c > 0 for _, _, p, c in seen), seen
