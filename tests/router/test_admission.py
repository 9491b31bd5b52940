"""What a request reserves at admission: its body, plus the most it may generate times the choices it asks for,
and never less than what the engine will be allowed to generate."""

from __future__ import annotations

import json

import pytest

from llmgw.router.admission import MAX_COST, Unreservable, reserve


def res(payload: dict[str, object], path: str = "/v1/chat/completions") -> tuple[dict[str, object], int, int]:
    body = json.dumps(payload).encode()
    out, cost = reserve(path, payload, body, 1024)
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
