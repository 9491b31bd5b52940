"""The sim HTTP app in-process, spoken to by aiohttp and by the official OpenAI client."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from openai.types import CompletionUsage

from llmgw.core.clock import FakeClock
from llmgw.sim.openai_format import embedding_vector
from llmgw.sim.server import make_app

MODEL = "sim-model"
CLOCK_START = 1_800_000_123.0


@pytest_asyncio.fixture
async def client() -> AsyncIterator[TestClient[web.Request, web.Application]]:
    app = make_app(MODEL, tokens=6, tokens_per_second=0, clock=FakeClock(start=CLOCK_START))
    async with TestClient(TestServer(app)) as c:
        yield c


@pytest_asyncio.fixture
async def oai(client: TestClient[web.Request, web.Application]) -> AsyncIterator[openai.AsyncOpenAI]:
    base = str(client.make_url("/v1"))
    async with openai.AsyncOpenAI(api_key="unused", base_url=base, max_retries=0) as c:
        yield c


def _events(raw: str) -> list[str]:
    assert raw.endswith("\n\n")
    return raw[: -len("\n\n")].split("\n\n")


def _chunks(raw: str) -> list[dict[str, Any]]:
    events = _events(raw)
    assert events[-1] == "data: [DONE]"
    return [json.loads(e.removeprefix("data: ")) for e in events[:-1]]


@pytest.mark.asyncio
async def test_health_and_models(client: TestClient[web.Request, web.Application]) -> None:
    resp = await client.get("/health")
    assert resp.status == 200
    models = await (await client.get("/v1/models")).json()
    assert models["data"][0]["id"] == MODEL
    assert models["data"][0]["created"] == int(CLOCK_START)


@pytest.mark.asyncio
async def test_chat_usage_counts_words_and_max_tokens_caps(client: TestClient[web.Request, web.Application]) -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "three words here"}]},
    ]
    full = await (await client.post("/v1/chat/completions", json={"model": MODEL, "messages": messages})).json()
    assert full["usage"] == {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11}
    assert full["choices"][0]["finish_reason"] == "stop"
    assert full["created"] == int(CLOCK_START)

    body = {"model": MODEL, "messages": messages, "max_tokens": 2}
    capped = await (await client.post("/v1/chat/completions", json=body)).json()
    assert capped["usage"]["completion_tokens"] == 2
    assert capped["choices"][0]["message"]["content"] == "lorem ipsum"
    assert capped["choices"][0]["finish_reason"] == "length"


@pytest.mark.asyncio
async def test_chat_stream_is_sse_with_optional_usage(client: TestClient[web.Request, web.Application]) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    resp = await client.post("/v1/chat/completions", json=body)
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    chunks = _chunks(await resp.text())
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert len(text.split()) == 6
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert all("usage" not in c for c in chunks)

    body["stream_options"] = {"include_usage": True}
    chunks = _chunks(await (await client.post("/v1/chat/completions", json=body)).text())
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {"prompt_tokens": 1, "completion_tokens": 6, "total_tokens": 7}
    assert all(c["usage"] is None for c in chunks[:-1])


@pytest.mark.asyncio
async def test_completions_plain_and_streamed(client: TestClient[web.Request, web.Application]) -> None:
    body: dict[str, Any] = {"model": MODEL, "prompt": ["one two", "three"], "max_tokens": 3}
    plain = await (await client.post("/v1/completions", json=body)).json()
    assert plain["object"] == "text_completion"
    assert plain["choices"][0]["text"] == "lorem ipsum dolor"
    assert plain["usage"] == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}

    body |= {"stream": True, "stream_options": {"include_usage": True}}
    chunks = _chunks(await (await client.post("/v1/completions", json=body)).text())
    assert [c["choices"][0]["text"] for c in chunks[:3]] == ["lorem", " ipsum", " dolor"]
    assert chunks[3]["choices"][0]["finish_reason"] == "length"
    assert chunks[4]["usage"]["completion_tokens"] == 3


@pytest.mark.asyncio
async def test_embeddings_are_deterministic_and_distinct(client: TestClient[web.Request, web.Application]) -> None:
    body = {"model": MODEL, "input": ["alpha beta", "gamma", "alpha beta"]}
    first = await (await client.post("/v1/embeddings", json=body)).json()
    again = await (await client.post("/v1/embeddings", json=body)).json()
    vectors = [d["embedding"] for d in first["data"]]
    assert first == again
    assert vectors[0] == vectors[2] != vectors[1]
    assert len(vectors[0]) == 16
    assert abs(sum(v * v for v in vectors[0]) - 1.0) < 1e-9
    assert first["usage"] == {"prompt_tokens": 5, "total_tokens": 5}


@pytest.mark.parametrize(
    ("path", "body", "status", "param"),
    [
        ("/v1/chat/completions", {"model": "other", "messages": [{"role": "user", "content": "x"}]}, 404, "model"),
        ("/v1/chat/completions", {"model": MODEL, "messages": []}, 400, "messages"),
        ("/v1/chat/completions", {"model": MODEL, "messages": [{"content": "x"}], "max_tokens": 0}, 400, "max_tokens"),
        ("/v1/completions", {"model": MODEL}, 400, "prompt"),
        ("/v1/completions", {"model": MODEL, "prompt": "x", "stream_options": {"include_usage": True}}, 400,
         "stream_options"),
        ("/v1/embeddings", {"model": MODEL, "input": "x", "dimensions": 0}, 400, "dimensions"),
    ],
)  # fmt: skip
@pytest.mark.asyncio
async def test_bad_requests_get_openai_errors(
    client: TestClient[web.Request, web.Application], path: str, body: dict[str, Any], status: int, param: str
) -> None:
    resp = await client.post(path, json=body)
    assert resp.status == status
    assert (await resp.json())["error"]["param"] == param


@pytest.mark.asyncio
async def test_body_that_is_not_json_is_a_400(client: TestClient[web.Request, web.Application]) -> None:
    resp = await client.post("/v1/chat/completions", data=b"{not json", headers={"Content-Type": "application/json"})
    assert resp.status == 400
    assert "not valid JSON" in (await resp.json())["error"]["message"]


@pytest.mark.asyncio
async def test_the_openai_client_understands_every_endpoint(oai: openai.AsyncOpenAI) -> None:
    assert [m.id async for m in oai.models.list()] == [MODEL]

    chat = await oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hello there"}])
    assert chat.choices[0].message.content == "lorem ipsum dolor sit amet consectetur"
    assert chat.usage is not None and chat.usage.prompt_tokens == 2

    stream = await oai.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hello"}],
        stream=True,
        stream_options={"include_usage": True},
        max_tokens=4,
    )
    parts: list[str] = []
    usage: CompletionUsage | None = None
    async for chunk in stream:
        parts.extend(c.delta.content or "" for c in chunk.choices)
        usage = chunk.usage or usage
    assert "".join(parts) == "lorem ipsum dolor sit"
    assert usage is not None and usage.completion_tokens == 4

    done = await oai.completions.create(model=MODEL, prompt="a b c", max_tokens=1)
    assert done.choices[0].text == "lorem"

    # The client asks for base64 embeddings by default and decodes them to floats.
    emb = await oai.embeddings.create(model=MODEL, input="some text")
    expected = embedding_vector("some text", 16)
    assert [round(v, 5) for v in emb.data[0].embedding] == [round(v, 5) for v in expected]

    with pytest.raises(openai.NotFoundError):
        await oai.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])


@pytest.mark.asyncio
async def test_tokens_are_paced_at_the_configured_rate() -> None:
    app = make_app(MODEL, tokens=4, tokens_per_second=20)
    async with TestClient(TestServer(app)) as c:
        loop = asyncio.get_running_loop()
        start = loop.time()
        resp = await c.post("/v1/completions", json={"model": MODEL, "prompt": "x"})
        assert (await resp.json())["usage"]["completion_tokens"] == 4
        # Four tokens at 20/s cannot take less than 0.2 s.
        assert loop.time() - start >= 0.2


def test_make_app_rejects_negative_settings() -> None:
    with pytest.raises(ValueError):
        make_app(MODEL, tokens=-1)
    with pytest.raises(ValueError):
        make_app(MODEL, tokens_per_second=-1.0)
