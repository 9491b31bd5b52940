"""Admitting a request against its key's limits (core/quota.py, counted by control/quotas.py): what it reserves,
how a refusal is answered, and what it is settled at when it ends."""

from __future__ import annotations

import json
import math
from typing import Any

from aiohttp import web

from llmgw.core import quota
from llmgw.router.errors import openai_error
from llmgw.router.proxy import CLIENT_CLOSED
from llmgw.router.stats import Measure
from llmgw.wire.router import Admission

# the body field bounding what a request generates, per endpoint (None: it generates nothing)
MAX_FIELDS: dict[str, tuple[str, ...] | None] = {
    "/v1/embeddings": None,
    "/v1/responses": ("max_output_tokens",),
    "/v1/completions": ("max_tokens",),  # completions have no max_completion_tokens: an engine ignores it there
}
DEFAULT_FIELDS = ("max_completion_tokens", "max_tokens")
CHOICE_FIELDS = ("n", "best_of")  # each choice generated is generated in full: the bound is per choice
MAX_COST = 10**15
# content parts whose tokens the body's bytes do not bound (OpenAI's chat and Responses, Anthropic's Messages)
MEDIA_TYPES = frozenset({"image_url", "input_image", "image", "input_audio", "audio_url", "video_url", "input_file",
                         "file", "document"})
MEDIA_DEPTH = 4  # messages/input -> item -> content -> part


class Unreservable(ValueError):
    """The request's own bounds cannot be read (answered 400: the engine could read them otherwise)."""


def _whole(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def media_parts(v: object, depth: int = MEDIA_DEPTH) -> int:
    """How many image, audio, video or file parts `v` (a request's messages or input) holds."""
    if depth < 0:
        return 0
    if isinstance(v, list):
        return sum(media_parts(x, depth - 1) for x in v)
    if isinstance(v, dict):
        if v.get("type") in MEDIA_TYPES:
            return 1
        return media_parts(v.get("content"), depth - 1)
    return 0


def reserve(path: str, payload: dict[str, Any], body: bytes, default_max: int, *,
            media_tokens: int) -> tuple[bytes, int]:
    """(the body to forward, the tokens the request reserves): its body's bytes and `media_tokens` for each image,
    audio, video or file part, plus the most it may generate, times the choices it asks for. A request that does
    not bound what it generates is given `default_max` (in the body the engine sees); a bound that is not a whole
    number is refused (an engine might read 1e9 or "5000"): nothing admitted may cost more than it reserved."""
    fields = MAX_FIELDS.get(path, DEFAULT_FIELDS)
    media = media_tokens * (media_parts(payload.get("messages")) + media_parts(payload.get("input")))
    if fields is None:
        return body, min(MAX_COST, quota.reservation(len(body), 0) + media)
    given = []
    for f in fields:
        v = payload.get(f)
        if v is not None:
            if not _whole(v) or v < 0:
                raise Unreservable(f"'{f}' must be a whole number of tokens, 0 or more")
            given.append(v)
    choices = 1
    for f in CHOICE_FIELDS:
        v = payload.get(f)
        if v is not None:
            if not _whole(v) or v < 1:
                raise Unreservable(f"'{f}' must be a whole number, 1 or more")
            choices = max(choices, v)
    prompt = payload.get("prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
        choices *= len(prompt)  # a batch of prompts: each is answered in full
    # the engine is told the bound reserved, in every field it might read: 0 reads as "none" to some (vLLM's
    # `max_completion_tokens or max_tokens`), and with two fields given an engine may honour either
    most = max(1, *given) if given else default_max
    told = {f: most for f in fields if f in payload} or {fields[-1]: most}
    if any(payload.get(f) != v for f, v in told.items()):
        payload.update(told)
        body = json.dumps(payload).encode()
    return body, min(MAX_COST, quota.reservation(len(body), most * choices) + media)


def refused(a: Admission) -> web.Response:
    """A refusal in OpenAI's shape: 429 rate_limit_exceeded with Retry-After for what passes with time,
    insufficient_quota (and request_too_large) without it, and an instruction to the official clients not to retry
    those (`x-should-retry: false`)."""
    headers = dict(a.headers)
    if a.retry_after is not None:
        headers["Retry-After"] = str(max(1, math.ceil(a.retry_after)))
        headers["retry-after-ms"] = str(max(1, math.ceil(a.retry_after * 1000)))
    else:
        headers["x-should-retry"] = "false"
    if a.refusal == "invalid_api_key":
        return openai_error(401, a.message, "invalid_request_error", "invalid_api_key")
    if a.refusal == "limits_unavailable":
        return openai_error(503, a.message, "service_unavailable", "limits_unavailable", headers=headers)
    kind = "insufficient_quota" if a.refusal == quota.Refusal.Quota else "requests"
    code = a.refusal or quota.Refusal.Rate.value
    return openai_error(429, a.message, kind, code, headers=headers)


def used_of(m: Measure, reached: bool, cost: int) -> int:
    """What an admitted request is settled at: nothing if it reached no engine; what the engine reported when the
    answer was whole; its whole reservation otherwise (see below)."""
    if not reached:
        return 0
    used = m.prompt_tokens + m.completion_tokens
    if m.status in (0, CLIENT_CLOSED) or m.status >= 500 or (m.status == 200 and used == 0):
        # the client left, the engine failed or timed out after it had the request, or an answer whose usage the
        # router cannot read (the Responses and Messages APIs report theirs otherwise): what it may have cost
        return cost
    return used
