"""The official anthropic client, unchanged, against the router and a real llama-server: a message, a stream,
messages.count_tokens (the count coding agents ask for), and the model list, with the key sent as x-api-key as the
client sends it. The SDK and the router's Messages path are tested together, as clients meet them."""

from __future__ import annotations

import anthropic
import pytest

from tests.router.conftest import RouterUnderTest

pytestmark = pytest.mark.usefixtures("llama")

MESSAGES: list[anthropic.types.MessageParam] = [{"role": "user", "content": "Name a fruit."}]


def client(rut: RouterUnderTest) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=rut.url, api_key=rut.key, max_retries=0)


async def test_a_message_and_its_usage(rut: RouterUnderTest) -> None:
    m = await client(rut).messages.create(model="smollm2", max_tokens=10, messages=MESSAGES)
    assert m.role == "assistant" and m.content and m.content[0].type == "text" and m.content[0].text
    assert m.usage.input_tokens > 0 and m.usage.output_tokens > 0


async def test_a_stream_of_text(rut: RouterUnderTest) -> None:
    async with client(rut).messages.stream(model="smollm2", max_tokens=10, messages=MESSAGES) as stream:
        text = "".join([t async for t in stream.text_stream])
        final = await stream.get_final_message()
    assert text and final.usage.output_tokens > 0


async def test_count_tokens_is_the_engines_count(rut: RouterUnderTest) -> None:
    counted = await client(rut).messages.count_tokens(model="smollm2", messages=MESSAGES)
    m = await client(rut).messages.create(model="smollm2", max_tokens=1, messages=MESSAGES)
    # the same prompt, counted as the engine reads it (a prompt it has cached is read from its cache: Anthropic's
    # usage counts those apart)
    assert counted.input_tokens > 0
    assert counted.input_tokens == m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0)


async def test_models_and_a_wrong_key_in_anthropics_words(rut: RouterUnderTest) -> None:
    ids = sorted([m.id async for m in client(rut).models.list()])
    assert "smollm2" in ids
    bad = anthropic.AsyncAnthropic(base_url=rut.url, api_key="llmgw-not-a-key", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as e:
        await bad.messages.create(model="smollm2", max_tokens=1, messages=MESSAGES)
    assert e.value.status_code == 401
