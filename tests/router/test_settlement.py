"""What an admitted request is settled at, how a refusal is answered, and the reservation's edges, held directly
(router/limits.py's used_of, refused and reserve): the rules a mutation-testing run found unguarded by the
end-to-end limit tests."""

from __future__ import annotations

import json

import pytest

from llmgw.api.router import Admission
from llmgw.router.limits import Unreservable, refused, reserve, used_of
from llmgw.router.proxy import CLIENT_CLOSED
from llmgw.router.stats import Measure

COST = 100


def measured(status: int, prompt: int, completion: int) -> Measure:
    return Measure(start=0.0, status=status, prompt_tokens=prompt, completion_tokens=completion)


@pytest.mark.parametrize(("status", "prompt", "completion", "settled"), [
    (200, 3, 4, 7),  # a whole answer: what the engine reported
    (200, 0, 1, 1),
    (400, 0, 0, 0),  # the engine refused it: it generated nothing
    (200, 0, 0, COST),  # a whole answer whose usage could not be read: what it may have cost
    (0, 2, 5, COST),  # outcome unknown
    (CLIENT_CLOSED, 2, 5, COST),  # the client left: the engine may go on generating
    (500, 2, 5, COST),
    (502, 2, 5, COST),
])
def test_a_request_that_reached_an_engine_is_settled_at_what_it_used_or_could_have(
    status: int, prompt: int, completion: int, settled: int
) -> None:
    assert used_of(measured(status, prompt, completion), True, COST) == settled


def test_a_request_that_reached_no_engine_costs_nothing() -> None:
    assert used_of(measured(CLIENT_CLOSED, 2, 5), False, COST) == 0


def test_a_rate_refusal_says_when_to_retry_in_seconds_and_milliseconds() -> None:
    r = refused(Admission(admitted=False, refusal="rate_limit_exceeded", message="rpm", retry_after=1.0))
    assert r.status == 429
    assert (r.headers["Retry-After"], r.headers["retry-after-ms"]) == ("1", "1000")
    r = refused(Admission(admitted=False, refusal="rate_limit_exceeded", message="rpm", retry_after=0.0004))
    assert (r.headers["Retry-After"], r.headers["retry-after-ms"]) == ("1", "1")
    assert "x-should-retry" not in r.headers


def test_a_spent_budget_tells_the_client_not_to_retry() -> None:
    r = refused(Admission(admitted=False, refusal="insufficient_quota", message="spent"))
    assert r.status == 429 and r.headers["x-should-retry"] == "false" and "Retry-After" not in r.headers
    assert r.text is not None
    err = json.loads(r.text)["error"]
    assert (err["type"], err["code"], err["message"]) == ("insufficient_quota", "insufficient_quota", "spent")


def test_a_key_refused_by_the_control_plane_is_a_401_with_its_words() -> None:
    r = refused(Admission(admitted=False, refusal="invalid_api_key", message="this key was revoked"))
    assert r.status == 401 and r.text is not None
    err = json.loads(r.text)["error"]
    assert (err["code"], err["message"]) == ("invalid_api_key", "this key was revoked")


def test_limits_that_cannot_be_checked_are_a_503_saying_so_with_when_to_retry() -> None:
    r = refused(Admission(admitted=False, refusal="limits_unavailable", message="no limit keeper", retry_after=2.0))
    assert r.status == 503 and r.headers["Retry-After"] == "2" and r.text is not None
    err = json.loads(r.text)["error"]
    assert (err["type"], err["code"], err["message"]) == ("service_unavailable", "limits_unavailable",
                                                          "no limit keeper")


def test_a_rate_refusal_is_of_type_requests_and_a_401_of_type_invalid_request_error() -> None:
    for refusal, status, kind in (("rate_limit_exceeded", 429, "requests"),
                                  ("request_too_large", 429, "requests"),
                                  ("invalid_api_key", 401, "invalid_request_error")):
        r = refused(Admission(admitted=False, refusal=refusal, message="m"))
        assert r.status == status and r.text is not None
        assert (json.loads(r.text)["error"]["type"], json.loads(r.text)["error"]["code"]) == (kind, refusal)


def reserved(path: str, payload: dict[str, object], media_tokens: int = 0) -> tuple[bytes, bytes, int]:
    body = json.dumps(payload).encode()
    out, cost = reserve(path, payload, body, 1024, media_tokens=media_tokens)
    return body, out, cost


def test_bounds_of_zero_tokens_and_one_choice_are_taken_with_their_words_otherwise() -> None:
    _, _, cost = reserved("/v1/chat/completions", {"model": "m", "max_tokens": 0, "n": 1})
    assert cost > 0
    with pytest.raises(Unreservable, match="'max_tokens' must be a whole number of tokens, 0 or more"):
        reserved("/v1/chat/completions", {"model": "m", "max_tokens": -1})
    with pytest.raises(Unreservable, match="'n' must be a whole number, 1 or more"):
        reserved("/v1/chat/completions", {"model": "m", "n": 0})


def test_a_batch_of_prompts_reserves_each_prompts_choices_and_a_single_prompt_once() -> None:
    body, _, cost = reserved("/v1/completions", {"model": "m", "prompt": ["a", "b", "c"], "max_tokens": 10, "n": 2})
    assert cost == len(body) + 3 * 2 * 10
    body, _, cost = reserved("/v1/completions", {"model": "m", "prompt": "abc", "max_tokens": 10})
    assert cost == len(body) + 10


def test_a_body_already_carrying_its_bound_is_forwarded_as_it_came() -> None:
    body = b'{"model":"m","max_tokens":10}'  # not json.dumps' spacing: rewritten, it would change
    out, cost = reserve("/v1/chat/completions", json.loads(body), body, 1024, media_tokens=0)
    assert out == body and cost == len(body) + 10


def test_media_in_an_embeddings_input_is_reserved_too() -> None:
    image = {"type": "image_url", "image_url": {"url": "https://example.invalid/a.png"}}
    body, _, cost = reserved("/v1/embeddings", {"model": "m", "input": [image]}, media_tokens=5000)
    assert cost == len(body) + 5000
