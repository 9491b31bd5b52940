"""Admitting a request against its key's limits (core/limits.py, counted by control/tenants/limit_counters.py): what it
reserves, how a refusal is answered, and what it is settled at when it ends."""

from __future__ import annotations

import json
import logging
import math
import re
from typing import Any

from aiohttp import web

from llmgw.api.router import Admission
from llmgw.core import limits as key_limits
from llmgw.router.errors import openai_error
from llmgw.router.proxy import CLIENT_CLOSED
from llmgw.router.stats import Measure
from llmgw.router.usage import MAX_TOKENS

log = logging.getLogger(__name__)

# where a request generates nothing; elsewhere the field added when a request gives no bound of its own
GENERATES_NOTHING = frozenset({"/v1/embeddings", "/v1/messages/count_tokens"})
ADDED_FIELD = {"/v1/responses": "max_output_tokens"}
# every body field an engine reads as a bound or a number of choices, on any endpoint (an engine reads fields from
# other APIs too: llama-server takes n_predict, then max_completion_tokens, on /v1/completions as well): OpenAI's
# and Anthropic's names, then llama-server's n_predict and SGLang's max_new_tokens. Plain request shapes, written
# here so that the router imports nothing of the agent; a test holds them to every engine adapter's Bounds.
MAX_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens", "n_predict", "max_new_tokens")
CHOICES = ("n", "best_of", "n_cmpl")  # each choice is generated in full (n_cmpl: llama-server's n)
MAX_COST = 10**15
# content parts whose tokens the body's bytes do not bound (OpenAI's chat and Responses, Anthropic's Messages),
# counted wherever they are (an Anthropic tool_result holds images too)
MEDIA_TYPES = frozenset({"image_url", "input_image", "image", "input_audio", "audio_url", "video_url", "input_file",
                         "file", "document"})
# a body without these bytes holds no media part (an escaped name could spell one: walked too)
_MAYBE_MEDIA = re.compile(rb"image|audio|video|file|document|\\u")


class Unreservable(ValueError):
    """The request's own bounds cannot be read (answered 400: the engine could read them otherwise)."""


def _whole(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def media_parts(v: object) -> int:
    """How many image, audio, video or file parts `v` holds, at any depth (walked without recursion: a body nested
    as deeply as the JSON decoder allows is walked too)."""
    n, todo = 0, [v]
    while todo:
        x = todo.pop()
        if isinstance(x, dict):
            t = x.get("type")
            if isinstance(t, str) and t in MEDIA_TYPES:
                n += 1
            todo.extend(x.values())
        elif isinstance(x, list):
            todo.extend(x)
    return n


def _ambiguous(body: bytes, fields: dict[str, int]) -> bool:
    """Whether `body` may give a field twice (written twice, or spelled with escapes): the decoder here keeps the
    last, an engine's might keep the first. Sent as decoded here, it gives each once."""
    return b"\\u" in body or any(body.count(f'"{f}"'.encode()) > 1 for f in (*fields, *CHOICES))


def reserve(path: str, payload: dict[str, Any], body: bytes, default_max: int, *,
            media_tokens: int) -> tuple[bytes, int]:
    """(the body to forward, the tokens the request reserves): its body's bytes and `media_tokens` for each image,
    audio, video or file part, plus the most it may generate, times the choices it asks for. A request that does
    not bound what it generates is given `default_max` (in the body the engine sees); a bound that is not a whole
    number is refused (an engine might read 1e9 or "5000"): nothing admitted may cost more than it reserved."""
    media = media_tokens * media_parts(payload) if media_tokens and _MAYBE_MEDIA.search(body) else 0
    if path in GENERATES_NOTHING:
        return body, min(MAX_COST, key_limits.reservation(len(body), 0) + media)
    given = []
    for f in MAX_FIELDS:
        v = payload.get(f)
        if v is not None:
            if not _whole(v) or v < 0:
                raise Unreservable(f"'{f}' must be a whole number of tokens, 0 or more")
            given.append(v)
    choices = 1
    for f in CHOICES:
        v = payload.get(f)
        if v is not None:
            if not _whole(v) or v < 1:
                raise Unreservable(f"'{f}' must be a whole number, 1 or more")
            choices = max(choices, v)
    prompt = payload.get("prompt")
    if isinstance(prompt, list) and prompt and not all(_whole(p) for p in prompt):
        choices *= len(prompt)  # a batch of prompts (strings, token lists, llama.cpp's objects): each answered in full
    # the engine is told the bound reserved, in every field given that any engine reads: 0 reads as "none" to some
    # (vLLM's `max_completion_tokens or max_tokens`), and with several given an engine honours its own first; and
    # always in the path's own field, which every engine reads there: a field only some engine reads (n_predict on
    # vLLM) would otherwise leave the serving engine unbounded
    most = max(1, *given) if given else default_max
    told = {f: most for f in MAX_FIELDS if f in payload}
    told[ADDED_FIELD.get(path, "max_tokens")] = most
    if any(payload.get(f) != v for f, v in told.items()) or _ambiguous(body, told):
        payload.update(told)
        body = json.dumps(payload).encode()
    return body, min(MAX_COST, key_limits.reservation(len(body), most * choices) + media)


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
    kind = "insufficient_quota" if a.refusal == key_limits.LimitRefusal.Quota else "requests"
    code = a.refusal or key_limits.LimitRefusal.Rate.value
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
    return min(used, cost)  # more than reserved is an alarm (bounded), never a bill


def bounded(m: Measure, cost: int, replica: str) -> None:
    """Hold what a request that reserved `cost` tokens is recorded and billed at to its reservation: an engine
    reporting more (it ignored its bound, or its count is a lie) is an alarm, logged and counted, not a bill. A
    request of a key without limits reserved nothing (0): its two counts together are held to MAX_TOKENS, beyond
    which no count is a count (each alone already is, usage.py)."""
    ceiling = cost or MAX_TOKENS
    if m.prompt_tokens + m.completion_tokens <= ceiling:
        return
    log.warning("replica %s reported %d prompt and %d completion tokens for a request that %s", replica,
                m.prompt_tokens, m.completion_tokens, f"reserved {cost}: recorded at its reservation" if cost else
                f"reserved nothing (its key has no limits): recorded at {MAX_TOKENS} in all")
    m.overrun = True
    m.prompt_tokens = min(m.prompt_tokens, ceiling)
    m.completion_tokens = ceiling - m.prompt_tokens
