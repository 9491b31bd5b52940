"""LangChain's ChatOpenAI, as applications build on it, against the router and a real llama-server: invoke and
stream, with its own retries and timeouts as they come. It wraps the openai client, so this holds that what
LangChain adds (its message shapes, its streaming of chunks, its usage metadata) reads llmgw's answers as an
engine's."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, AIMessageChunk
from langchain_openai import ChatOpenAI

from tests.router.conftest import RouterUnderTest

pytestmark = pytest.mark.usefixtures("llama")


def chat(rut: RouterUnderTest) -> ChatOpenAI:
    return ChatOpenAI(base_url=rut.url + "/v1", api_key=rut.key, model="smollm2", max_tokens=10)  # type: ignore[arg-type,call-arg]


async def test_invoke_answers_with_usage(rut: RouterUnderTest) -> None:
    m = await chat(rut).ainvoke("Name a fruit.")
    assert isinstance(m, AIMessage) and m.content
    assert m.usage_metadata is not None and m.usage_metadata["output_tokens"] > 0


async def test_stream_arrives_in_chunks(rut: RouterUnderTest) -> None:
    chunks = [c async for c in chat(rut).astream("Count to five.")]
    assert len(chunks) >= 2 and all(isinstance(c, AIMessageChunk) for c in chunks)
    assert "".join(str(c.content) for c in chunks)
