"""Finding the engine's usage cheaply: last in a body, across split stream reads, and the stripped chunk."""

from __future__ import annotations

import json
from typing import Any

from llmgw.router.usage import StreamUsage, usage_from_body


def sse(event: dict[str, Any]) -> bytes:
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


def decoded(body: bytes) -> tuple[int, int]:
    """What the JSON decoder makes of the body's usage (the path every shape but the plain one takes)."""
    u = json.loads(body).get("usage")
    return usage_from_body(json.dumps({"x": 1, "usage": u}, indent=1).encode())  # indented: not the plain shape


def test_the_plain_shape_is_read_as_the_decoder_reads_it() -> None:
    """The usage of most answers is read by one match instead of a JSON decoder: whatever the match takes, the
    decoder must have read the same, and a shape the match does not take is decoded."""
    for usage in (
        {"prompt_tokens": 12, "completion_tokens": 30, "total_tokens": 42},
        {"prompt_tokens": 0, "completion_tokens": 0},
        {"prompt_tokens": 5, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 3}},
        {"prompt_tokens": 2**40, "completion_tokens": 10**18},  # beyond a count: at most MAX_TOKENS
        {"completion_tokens": 3, "prompt_tokens": 4},  # another order: decoded
        {"prompt_tokens": -5, "completion_tokens": 2},  # not a count: decoded, as 0
        {"prompt_tokens": 1.5, "completion_tokens": 2},
        {"prompt_tokens": "9", "completion_tokens": 2},
        {"input_tokens": 3, "output_tokens": 4},
    ):
        for sep in ((",", ":"), (", ", ": ")):
            body = json.dumps({"id": "c", "choices": [{"message": {"content": '"usage": {"prompt_tokens": 99'}}],
                               "usage": usage}, separators=sep).encode()
            assert usage_from_body(body) == decoded(body), (usage, sep)
    assert usage_from_body(b'{"usage": {"prompt_tokens": 007, "completion_tokens": 1}}') == (0, 0)  # not JSON
    # a key given twice (found in review): the decoder keeps the last, and so must the match
    twice = b'{"id":"c","usage":{"prompt_tokens":5,"completion_tokens":7,"completion_tokens":900}}'
    assert usage_from_body(twice) == (5, 900)


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


def test_the_responses_and_messages_apis_usage_is_read() -> None:
    """They say input and output tokens, and put them in the object their last (or first) event carries: unread,
    a limited key's request is settled at its reservation and its usage recorded as nothing."""
    responses = {"object": "response", "output": [{"type": "message", "content": [{"text": "x"}]}],
                 "usage": {"input_tokens": 12, "output_tokens": 30, "total_tokens": 42,
                           "input_tokens_details": {"cached_tokens": 4}}}
    assert usage_from_body(json.dumps(responses).encode()) == (12, 30)
    messages = {"type": "message", "content": [{"type": "text", "text": "x"}],
                "usage": {"input_tokens": 5, "cache_read_input_tokens": 100, "output_tokens": 9}}
    assert usage_from_body(json.dumps(messages).encode()) == (105, 9)
    w = StreamUsage(strip=False)
    stream = (sse({"type": "response.created", "response": {"id": "r", "usage": None}})
              + sse({"type": "response.output_text.delta", "delta": "x"})
              + sse({"type": "response.completed", "response": {"id": "r", "usage": responses["usage"]}}))
    assert w.feed(stream) == stream and w.usage == (12, 30)
    w = StreamUsage(strip=False)
    stream = (b"event: message_start\n" + sse({"type": "message_start", "message": {
                  "id": "m", "usage": {"input_tokens": 25, "output_tokens": 1}}})
              + b"event: content_block_delta\n" + sse({"type": "content_block_delta", "delta": {"text": "x"}})
              + b"event: message_delta\n" + sse({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                                                 "usage": {"output_tokens": 15}}))
    assert w.feed(stream) == stream and w.usage == (25, 15)
