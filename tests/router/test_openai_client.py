"""The official openai client, unchanged, against the router: real llama-server and sim replicas."""

from __future__ import annotations

import sqlite3

import openai
import pytest

from tests.harness import failures_logged
from tests.router.conftest import RouterUnderTest, settle

pytestmark = pytest.mark.usefixtures("llama")  # these talk to the real llama-server as well as to sim


def client(rut: RouterUnderTest, key: str | None = None) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=rut.url + "/v1", api_key=key or rut.key, max_retries=0)


async def test_models_lists_what_may_run(rut: RouterUnderTest) -> None:
    ids = sorted([m.id async for m in client(rut).models.list()])
    assert ids == ["sim-a", "sim-b", "sim-od", "smollm2"]  # sim-off is configured and off


async def test_chat_from_the_real_engine(rut: RouterUnderTest) -> None:
    r = await client(rut).chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "Name a fruit."}], max_tokens=10
    )
    assert r.choices[0].message.content
    assert r.usage is not None and r.usage.completion_tokens > 0


async def test_streaming_arrives_chunk_by_chunk(rut: RouterUnderTest) -> None:
    stream = await client(rut).chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "Count from 1 to 10, separated by commas."}],
        max_tokens=16, stream=True, temperature=0,
    )
    chunks = [c async for c in stream]
    parts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(chunks) >= 3  # the role, at least one token, the finish: each its own event
    assert parts and "".join(parts).strip()
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")


async def test_completions_and_embeddings(rut: RouterUnderTest) -> None:
    c = client(rut)
    r = await c.completions.create(model="smollm2", prompt="The sky is", max_tokens=5)
    assert r.choices[0].text
    s = await c.completions.create(model="sim-a", prompt="hello there", max_tokens=3)
    assert s.usage is not None and s.usage.completion_tokens == 3
    e = await c.embeddings.create(model="sim-a", input="hello")
    assert len(e.data[0].embedding) > 0


async def test_sim_stream_usage_is_recorded(rut: RouterUnderTest) -> None:
    stream = await client(rut).chat.completions.create(
        model="sim-a",
        messages=[{"role": "user", "content": "a b c"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [c async for c in stream]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 8
    await settle(rut)
    totals = {t.model: t for t in rut.store.usage_totals()}
    assert totals["sim-a"].completion_tokens == 8
    assert totals["sim-a"].key_id == rut.router.keys.check(rut.key).id  # type: ignore[union-attr]


async def test_wrong_key_is_refused_by_the_client_too(rut: RouterUnderTest) -> None:
    with pytest.raises(openai.AuthenticationError) as e:
        await client(rut, "llmgw-not-a-real-key").chat.completions.create(
            model="sim-a", messages=[{"role": "user", "content": "x"}]
        )
    assert e.value.code == "invalid_api_key"


async def test_every_stream_is_recorded_when_the_client_closes_at_done_or_walks_away(
    rut: RouterUnderTest, caplog: pytest.LogCaptureFixture
) -> None:
    """The defect: the official client closes as soon as it has [DONE], the router's last write failed, and 5 of
    20 streams against the real llama-server went unrecorded, each with a traceback; an abandoned stream never was."""
    c = client(rut)
    for _ in range(20):
        stream = await c.chat.completions.create(
            model="smollm2", max_tokens=4, stream=True, messages=[{"role": "user", "content": "Count to three."}]
        )
        async for _chunk in stream:
            pass
    stream = await c.chat.completions.create(
        model="sim-a", stream=True, messages=[{"role": "user", "content": "go"}]
    )
    async for _chunk in stream:
        break  # walk away mid-stream
    await stream.close()
    await settle(rut)
    with sqlite3.connect(rut.db) as db:
        seen = db.execute("SELECT model, status, completion_tokens FROM usage ORDER BY seq").fetchall()
    assert [s for m, s, _ in seen if m == "smollm2"] == [200] * 20
    assert all(t > 0 for m, _, t in seen if m == "smollm2")
    abandoned = [(s, t) for m, s, t in seen if m == "sim-a"]
    assert len(abandoned) == 1 and abandoned[0][0] in (200, 499)
    assert failures_logged(caplog) == []
