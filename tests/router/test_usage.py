"""Finding the engine's usage cheaply: last in a body, across split stream reads, and the stripped chunk."""

from __future__ import annotations

import json

from llmgw.router.usage import StreamUsage, usage_from_body


def sse(event: dict) -> bytes:  # type: ignore[type-arg]
    return b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"


TOKEN = sse({"choices": [{"delta": {"content": "hi"}}], "usage": None})
USAGE = sse({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}})
DONE = b"data: [DONE]\n\n"


def test_usage_from_body_reads_from_the_end_and_falls_back() -> None:
    big = {"data": [{"embedding": [0.1] * 5000}], "usage": {"prompt_tokens": 4, "completion_tokens": 0}}
    assert usage_from_body(json.dumps(big).encode()) == (4, 0)
    assert usage_from_body(b'{"usage": {"prompt_tokens": 2, "completion_tokens": 5}, "id": "x"}') == (2, 5)
    assert usage_from_body(b'{"choices": []}') == (0, 0)
    assert usage_from_body(b'{"usage": null}') == (0, 0)


def test_null_usage_chunks_are_passed_and_counted_as_nothing() -> None:
    w = StreamUsage(strip=False)
    assert w.feed(TOKEN * 3) == TOKEN * 3
    assert w.usage is None
    assert w.feed(USAGE + DONE) == USAGE + DONE
    assert w.usage == (7, 3)


def test_a_usage_line_split_across_reads_is_still_counted() -> None:
    w = StreamUsage(strip=False)
    whole = TOKEN + USAGE + DONE
    cut = len(TOKEN) + 20
    out = w.feed(whole[:cut]) + w.feed(whole[cut:])
    assert out == whole and w.usage == (7, 3)


def test_the_usage_chunk_the_router_asked_for_is_kept_from_the_client() -> None:
    w = StreamUsage(strip=True)
    out = w.feed(TOKEN) + w.feed(USAGE + DONE)
    assert out == TOKEN + DONE
    assert w.usage == (7, 3)
