"""What a request reserves at admission: its body, plus the most it may generate times the choices it asks for,
and never less than what the engine will be allowed to generate."""

from __future__ import annotations

import json

import pytest

from llmgw.router.limits import MAX_COST, Unreservable, bounded, reserve, used_of
from llmgw.router.stats import Measure


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
    nested = {"model": "m", "max_tokens": 1, "messages": [[[[[[image]]]]]]}  # however deep: counted
    body = json.dumps(nested).encode()
    assert reserve("/v1/chat/completions", nested, body, 1, media_tokens=5000)[1] == len(body) + 1 + 5000


def test_images_inside_an_anthropic_tool_result_are_counted() -> None:
    """The defect: 50 images in a tool_result (message -> content -> tool_result -> content -> image) reserved
    nothing for them."""
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    msg = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": [image] * 50}]}]}
    body = json.dumps(msg).encode()
    assert reserve("/v1/messages", msg, body, 1024, media_tokens=1000)[1] == len(body) + 10 + 50 * 1000


def test_a_part_whose_type_is_not_a_name_is_no_media_and_no_crash() -> None:
    schema = {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": [
        {"type": ["image"], "text": "pick an image"}, {"type": {"image": 1}}]}]}
    body = json.dumps(schema).encode()
    assert reserve("/v1/chat/completions", schema, body, 1, media_tokens=5000)[1] == len(body) + 1


# llama-server reads n_predict before max_completion_tokens before max_tokens, on every endpoint
@pytest.mark.parametrize(("path", "given"), [
    ("/v1/chat/completions", {"max_tokens": 5, "n_predict": 400}),
    ("/v1/completions", {"max_tokens": 5, "max_completion_tokens": 400}),
    ("/v1/completions", {"max_tokens": 5, "n_predict": 400}),
    ("/v1/responses", {"max_output_tokens": 5, "n_predict": 400}),
    ("/v1/responses", {"max_output_tokens": 5, "max_completion_tokens": 400}),
    ("/v1/messages", {"max_tokens": 5, "n_predict": 400}),
])
def test_every_length_field_an_engine_reads_is_reserved_and_told_the_bound(path: str, given: dict[str, int]
                                                                            ) -> None:
    sent, cost, size = res({"model": "m", **given}, path)
    assert cost == size + 400
    assert {f: sent[f] for f in given} == dict.fromkeys(given, 400)


# a field only some engine reads (n_predict: llama.cpp; max_new_tokens) given alone must not leave the engine that
# serves the request without a bound: the path's own field, which every engine reads there, carries it too
@pytest.mark.parametrize(("path", "given", "own"), [
    ("/v1/chat/completions", {"n_predict": 1}, "max_tokens"),
    ("/v1/completions", {"n_predict": 1}, "max_tokens"),
    ("/v1/chat/completions", {"max_output_tokens": 1}, "max_tokens"),
    ("/v1/responses", {"max_tokens": 1}, "max_output_tokens"),
    ("/v1/messages", {"n_predict": 1}, "max_tokens"),
])
def test_the_paths_own_bound_is_always_told(path: str, given: dict[str, int], own: str) -> None:
    sent, cost, size = res({"model": "m", **given}, path)
    assert cost == size + 1
    assert sent[own] == 1 and {f: sent[f] for f in given} == dict.fromkeys(given, 1)


def test_a_batch_of_llama_prompt_objects_reserves_each_prompt() -> None:
    """llama.cpp answers each {"prompt_string": ...} of a prompt list as a prompt of its own."""
    _, cost_one, size_one = res({"model": "m", "prompt": [{"prompt_string": "hi"}], "max_tokens": 100},
                                  "/v1/completions")
    _, cost, size = res({"model": "m", "prompt": [{"prompt_string": "hi"}] * 50, "max_tokens": 100},
                        "/v1/completions")
    assert cost == size + 50 * 100 and cost_one == size_one + 100
    _, cost, size = res({"model": "m", "prompt": [1, 2, 3], "max_tokens": 100}, "/v1/completions")
    assert cost == size + 100  # token ids: one prompt


def test_llama_servers_own_count_of_choices_reserves_each_in_full() -> None:
    _, cost, size = res({"model": "m", "prompt": "x", "max_tokens": 10, "n_cmpl": 4}, "/v1/completions")
    assert cost == size + 40
    with pytest.raises(Unreservable):
        res({"model": "m", "n_predict": -1})  # llama-server's "until the context is full"


def test_what_an_engine_reports_beyond_the_reservation_is_an_alarm_not_a_bill(caplog: pytest.LogCaptureFixture
                                                                              ) -> None:
    m = Measure(start=0.0, status=200, prompt_tokens=2**31, completion_tokens=2**31)
    bounded(m, 500, "r-1")
    assert (m.prompt_tokens, m.completion_tokens, m.overrun) == (500, 0, True)
    assert "replica r-1 reported 2147483648 prompt and 2147483648 completion tokens for a request that reserved 500: " \
        "recorded at its reservation" in caplog.text  # the operator's alarm names the replica whose count it doubts
    m = Measure(start=0.0, status=200, prompt_tokens=20, completion_tokens=2**31)
    assert used_of(m, True, 500) == 500  # settled at most at its reservation, however it is reached
    bounded(m, 500, "r-1")
    assert (m.prompt_tokens, m.completion_tokens) == (20, 480)
    m = Measure(start=0.0, status=200, prompt_tokens=20, completion_tokens=30)
    bounded(m, 500, "r-1")
    assert (m.prompt_tokens, m.completion_tokens, m.overrun) == (20, 30, False)
    m = Measure(start=0.0, status=200, prompt_tokens=20, completion_tokens=480)
    bounded(m, 500, "r-1")  # exactly what it reserved: what it was allowed, no alarm
    assert (m.prompt_tokens, m.completion_tokens, m.overrun) == (20, 480, False)


@pytest.mark.parametrize("raw", [b'{"model": "m", "n_predict": 400, "n_predict": 5}',
                                 b'{"model": "m", "n_predict": 5, "n_pr\\u0065dict": 400}',
                                 b'{"model": "m", "max_tokens": 5, "n": 9, "n": 1}',
                                 # only the escape says it is given twice: every other field is as it is told
                                 b'{"model": "m", "max_tok\\u0065ns": 400, "max_tokens": 5}'])
def test_a_field_given_twice_reaches_the_engine_once_as_reserved(raw: bytes) -> None:
    """An engine's decoder may keep the first of two; the body sent is the one decoded here."""
    payload = json.loads(raw)
    sent, cost = reserve("/v1/chat/completions", payload, raw, 1024, media_tokens=0)
    assert sent != raw and json.loads(sent) == payload and cost == len(sent) + payload.get("n_predict", 5)
