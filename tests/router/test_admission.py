"""What a request reserves at admission: its body, plus the most it may generate times the choices it asks for,
and never less than what the engine will be allowed to generate."""

from __future__ import annotations

import json

import pytest

from llmgw.router.admission import MAX_COST, Unreservable, reserve


def res(payload: dict[str, object], path: str = "/v1/chat/completions") -> tuple[dict[str, object], int, int]:
    body = json.dumps(payload).encode()
    out, cost = reserve(path, payload, body, 1024, media_tokens=0)
    return json.loads(out), cost, len(out)


def test_several_choices_reserve_each_choice_in_full() -> None:
    _, cost, size = res({"model": "m", "max_tokens": 100, "n": 3})
    assert cost == size + 300
    _, cost, size = res({"model": "m", "prompt": "x", "max_tokens": 10, "n": 2, "best_of": 5}, "/v1/completions")
    assert cost == size + 50


def test_both_bounds_given_reserve_the_larger_and_none_given_gets_the_default_in_the_body() -> None:
    _, cost, size = res({"model": "m", "max_tokens": 10, "max_completion_tokens": 700})
    assert cost == size + 700
    sent, cost, size = res({"model": "m"})
    assert sent["max_tokens"] == 1024 and cost == size + 1024
    sent, cost, size = res({"model": "m", "input": "hi"}, "/v1/responses")
    assert sent["max_output_tokens"] == 1024
    _, cost, size = res({"model": "m", "input": "hi"}, "/v1/embeddings")
    assert cost == size and "max_tokens" not in res({"model": "m"}, "/v1/embeddings")[0]


@pytest.mark.parametrize("bad", [{"max_tokens": 1e9}, {"max_tokens": "5000"}, {"max_tokens": True},
                                 {"max_tokens": -1}, {"max_completion_tokens": 2.5}, {"n": 0}, {"n": 1.5},
                                 {"best_of": "9"}])
def test_a_bound_that_is_not_a_whole_number_is_refused_not_replaced(bad: dict[str, object]) -> None:
    """The defect it guards: an engine may read 1e9 or "5000" as a bound while the router reserved its default."""
    with pytest.raises(Unreservable):
        res({"model": "m", **bad})


def test_a_huge_bound_is_reserved_at_the_most_the_wire_carries() -> None:
    assert res({"model": "m", "max_tokens": 10**14, "n": 100})[1] == MAX_COST


def test_each_image_audio_or_file_part_reserves_what_one_may_cost() -> None:
    """A URL of a few bytes can stand for thousands of prompt tokens: the body's bytes do not bound it."""
    image = {"type": "image_url", "image_url": {"url": "https://example.invalid/a.png"}}
    chat = {"model": "m", "max_tokens": 10, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "what is this"}, image, image]},
        {"role": "user", "content": "plain words are counted by their bytes"}]}
    body = json.dumps(chat).encode()
    _, cost = reserve("/v1/chat/completions", chat, body, 1024, media_tokens=5000)
    assert cost == len(body) + 10 + 2 * 5000
    responses = {"model": "m", "max_output_tokens": 10, "input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": "data:..."}, {"type": "input_file", "file_id": "f"}]}]}
    body = json.dumps(responses).encode()
    _, cost = reserve("/v1/responses", responses, body, 1024, media_tokens=5000)
    assert cost == len(body) + 10 + 2 * 5000
    nested = {"model": "m", "max_tokens": 1, "messages": [[[[[[image]]]]]]}  # deeper than any API nests: not walked
    body = json.dumps(nested).encode()
    assert reserve("/v1/chat/completions", nested, body, 1, media_tokens=5000)[1] == len(body) + 1
