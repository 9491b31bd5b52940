"""OpenAI request parsing and response bodies for the sim engine. Pure: no I/O, no clock, no randomness.

"Tokens" here are whitespace-separated words: prompt_tokens counts the words of the prompt or messages, and the
completion is K canned words, so `len(text.split()) == completion_tokens`.
"""

from __future__ import annotations

import base64
import hashlib
import math
import struct
from dataclasses import dataclass
from typing import Any

WORDS = (
    "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore et dolore "
    "magna aliqua"
).split()
EMBEDDING_DIMENSIONS = 16
MAX_EMBEDDING_DIMENSIONS = 4096

JSON = dict[str, Any]


class RequestError(Exception):
    """A request the sim refuses; rendered as an OpenAI error body with `status`."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code

    def body(self) -> JSON:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}


@dataclass(frozen=True)
class Generation:
    """What to generate for one chat or completion request."""

    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "length" when max_tokens cut the canned answer short, else "stop"
    stream: bool
    include_usage: bool


def canned_tokens(k: int) -> list[str]:
    """K tokens whose concatenation is K space-separated words."""
    return [(" " if i else "") + WORDS[i % len(WORDS)] for i in range(k)]


def usage(prompt_tokens: int, completion_tokens: int) -> JSON:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def check_model(body: JSON, served: str) -> None:
    model = body.get("model", served)
    if model != served:
        raise RequestError(404, f"The model `{model}` does not exist.", param="model", code="model_not_found")


def parse_chat(body: JSON, served: str, tokens: int) -> Generation:
    check_model(body, served)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "`messages` must be a non-empty list", param="messages")
    words = 0
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise RequestError(400, f"messages[{i}] must be an object", param="messages")
        words += _count_content(message.get("content"), f"messages[{i}].content")
    if "max_completion_tokens" in body:
        return _generation(body, words, tokens, "max_completion_tokens")
    return _generation(body, words, tokens, "max_tokens")


def parse_completion(body: JSON, served: str, tokens: int) -> Generation:
    check_model(body, served)
    if "prompt" not in body:
        raise RequestError(400, "`prompt` is required", param="prompt")
    return _generation(body, count_input(body["prompt"], "prompt"), tokens, "max_tokens")


def count_input(value: object, param: str) -> int:
    """Words in a prompt or embedding input: a string, a list of strings, or token ids (one token each)."""
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        if all(isinstance(v, str) for v in value):
            return sum(len(v.split()) for v in value)
        if all(_is_int(v) for v in value):
            return len(value)
        if all(isinstance(v, list) and all(_is_int(t) for t in v) for v in value):
            return sum(len(v) for v in value)
    raise RequestError(400, f"`{param}` must be a string, a list of strings, or token ids", param=param)


def chat_completion(id: str, created: int, model: str, text: str, gen: Generation) -> JSON:
    return {
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": gen.finish_reason,
            }
        ],
        "usage": usage(gen.prompt_tokens, gen.completion_tokens),
    }


def chat_chunk(id: str, created: int, model: str, delta: JSON, finish_reason: str | None, gen: Generation) -> JSON:
    chunk: JSON = {
        "id": id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }
    if gen.include_usage:
        chunk["usage"] = None  # OpenAI sends null on every chunk but the last when usage is asked for
    return chunk


def text_completion(id: str, created: int, model: str, text: str, gen: Generation) -> JSON:
    return {
        "id": id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": gen.finish_reason}],
        "usage": usage(gen.prompt_tokens, gen.completion_tokens),
    }


def text_chunk(id: str, created: int, model: str, text: str, finish_reason: str | None, gen: Generation) -> JSON:
    chunk: JSON = {
        "id": id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}],
    }
    if gen.include_usage:
        chunk["usage"] = None
    return chunk


def usage_chunk(id: str, created: int, model: str, object: str, gen: Generation) -> JSON:
    return {
        "id": id,
        "object": object,
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage(gen.prompt_tokens, gen.completion_tokens),
    }


def embeddings(body: JSON, served: str) -> JSON:
    """An embeddings response: a deterministic unit vector per input, derived from a hash of that input."""
    check_model(body, served)
    raw = body.get("input")
    items: list[object]
    if isinstance(raw, str) or (isinstance(raw, list) and raw and all(_is_int(v) for v in raw)):
        items = [raw]  # one text, or one list of token ids
    elif isinstance(raw, list) and raw:
        items = raw
    else:
        raise RequestError(400, "`input` must be a non-empty string or list", param="input")
    dims = body.get("dimensions", EMBEDDING_DIMENSIONS)
    if not isinstance(dims, int) or isinstance(dims, bool) or not 1 <= dims <= MAX_EMBEDDING_DIMENSIONS:
        raise RequestError(400, f"`dimensions` must be an integer in 1..{MAX_EMBEDDING_DIMENSIONS}", param="dimensions")
    encoding = body.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise RequestError(400, "`encoding_format` must be 'float' or 'base64'", param="encoding_format")
    data: list[JSON] = []
    words = 0
    for i, item in enumerate(items):
        words += count_input(item, "input")
        key = item if isinstance(item, str) else ",".join(map(str, item)) if isinstance(item, list) else ""
        vector = embedding_vector(key, dims)
        encoded: object = vector
        if encoding == "base64":
            encoded = base64.b64encode(struct.pack(f"<{dims}f", *vector)).decode()
        data.append({"object": "embedding", "index": i, "embedding": encoded})
    return {"object": "list", "data": data, "model": served, "usage": {"prompt_tokens": words, "total_tokens": words}}


def embedding_vector(text: str, dims: int) -> list[float]:
    """A unit vector of `dims` floats that depends only on `text`."""
    raw: list[float] = []
    block = 0
    while len(raw) < dims:
        digest = hashlib.sha256(f"{block}\0{text}".encode()).digest()
        raw.extend(v / 2**31 - 1.0 for (v,) in struct.iter_unpack("<I", digest))
        block += 1
    raw = raw[:dims]
    norm = math.sqrt(sum(v * v for v in raw)) or 1.0
    return [v / norm for v in raw]


def _generation(body: JSON, prompt_tokens: int, tokens: int, limit_param: str) -> Generation:
    limit = body.get(limit_param)
    if limit is None:
        k = tokens
    elif isinstance(limit, int) and not isinstance(limit, bool) and limit >= 1:
        k = min(tokens, limit)
    else:
        raise RequestError(400, f"`{limit_param}` must be a positive integer", param=limit_param)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError(400, "`stream` must be a boolean", param="stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise RequestError(400, "`stream_options` must be an object", param="stream_options")
    if options and not stream:
        raise RequestError(400, "`stream_options` is only allowed with `stream: true`", param="stream_options")
    n = body.get("n", 1)
    if n != 1:
        raise RequestError(400, "the sim engine generates one choice (`n` must be 1)", param="n")
    return Generation(
        prompt_tokens=prompt_tokens,
        completion_tokens=k,
        finish_reason="length" if k < tokens else "stop",
        stream=stream,
        include_usage=bool(options.get("include_usage", False)),
    )


def _count_content(content: object, param: str) -> int:
    if content is None:
        return 0  # e.g. an assistant message that only carried tool calls
    if isinstance(content, str):
        return len(content.split())
    if isinstance(content, list):
        words = 0
        for part in content:
            if not isinstance(part, dict):
                raise RequestError(400, f"`{param}` parts must be objects", param="messages")
            text = part.get("text")
            if isinstance(text, str):
                words += len(text.split())
        return words
    raise RequestError(400, f"`{param}` must be a string or a list of parts", param="messages")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
