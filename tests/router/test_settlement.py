"""What an admitted request is settled at, and how a refusal is answered, held directly (router/admission.py's
used_of and refused): the rules a mutation-testing run found unguarded by the end-to-end limit tests."""

from __future__ import annotations

import json

import pytest

from llmgw.router.admission import refused, used_of
from llmgw.router.proxy import CLIENT_CLOSED
from llmgw.router.stats import Measure
from llmgw.wire.router import Admission

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
