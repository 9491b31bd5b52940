"""Pure parts of the sim's OpenAI format: counting, capping, canned output, embeddings."""

from __future__ import annotations

import base64
import struct

import pytest

from llmgw.sim.openai_format import (
    RequestError,
    canned_tokens,
    count_input,
    embedding_vector,
    embeddings,
    parse_chat,
    parse_completion,
)


def test_canned_tokens_concatenate_to_k_words() -> None:
    tokens = canned_tokens(25)
    assert len(tokens) == 25
    assert len("".join(tokens).split()) == 25
    assert canned_tokens(0) == []


@pytest.mark.parametrize(
    ("value", "words"),
    [("a b  c", 3), ("", 0), (["a b", "c"], 3), ([1, 2, 3, 4], 4), ([[1, 2], [3]], 3)],
)
def test_count_input(value: object, words: int) -> None:
    assert count_input(value, "prompt") == words


@pytest.mark.parametrize("value", [None, 3, [1, "a"], {"text": "x"}])
def test_count_input_rejects_other_shapes(value: object) -> None:
    with pytest.raises(RequestError) as err:
        count_input(value, "prompt")
    assert err.value.status == 400


def test_max_completion_tokens_wins_and_larger_limits_do_not_extend() -> None:
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 1, "max_completion_tokens": 3}
    assert parse_chat(body, "m", 10).completion_tokens == 3
    long = parse_completion({"prompt": "x", "max_tokens": 50}, "m", 10)
    assert (long.completion_tokens, long.finish_reason) == (10, "stop")


@pytest.mark.parametrize(
    "body",
    [
        {"prompt": "x", "n": 2},
        {"prompt": "x", "stream": "yes"},
        {"prompt": "x", "max_tokens": True},
        {"prompt": "x", "stream": True, "stream_options": ["include_usage"]},
    ],
)
def test_invalid_generation_options(body: dict[str, object]) -> None:
    with pytest.raises(RequestError) as err:
        parse_completion(body, "m", 10)
    assert err.value.status == 400
    assert err.value.body()["error"]["type"] == "invalid_request_error"


def test_embedding_vectors_depend_only_on_the_text_and_honour_dimensions() -> None:
    assert embedding_vector("x", 40) == embedding_vector("x", 40)
    assert embedding_vector("x", 40) != embedding_vector("y", 40)
    assert len(embedding_vector("x", 40)) == 40
    out = embeddings({"input": [5, 6, 7], "dimensions": 3, "encoding_format": "base64"}, "m")
    assert len(out["data"]) == 1  # one list of token ids is one input
    decoded = struct.unpack("<3f", base64.b64decode(out["data"][0]["embedding"]))
    assert [round(v, 5) for v in decoded] == [round(v, 5) for v in embedding_vector("5,6,7", 3)]
    assert out["usage"]["prompt_tokens"] == 3
