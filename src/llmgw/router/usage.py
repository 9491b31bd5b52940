"""Token usage as engines report it, found without parsing more of a response than needed."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

_DECODER = json.JSONDecoder()
_NULL_USAGE = (b'"usage":null', b'"usage": null')
# what a usage-only stream event carries besides what an engine adds to it (llama.cpp: `timings`)
_USAGE_EVENT_FIELDS = frozenset({"usage", "choices", "id", "object", "created", "model", "system_fingerprint"})
MAX_TOKENS = 2**31  # an engine's count is a claim too: anything beyond this is not a count
# How OpenAI's chat and completions answers, vLLM's, SGLang's and llama-server's begin their usage: read with one
# match at the last "usage" instead of a JSON decoder (a few microseconds per request); any other shape is decoded
_PLAIN_USAGE = re.compile(rb'"usage"\s*:\s*\{\s*"prompt_tokens"\s*:\s*(0|[1-9][0-9]{0,18})\s*,'
                          rb'\s*"completion_tokens"\s*:\s*(0|[1-9][0-9]{0,18})\s*[,}]')


def _count(v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        return 0
    return min(max(v, 0), MAX_TOKENS)


def _counts(u: object) -> tuple[int, int]:
    """(prompt, completion) from a usage object: OpenAI's chat and completions name them so; the Responses and
    Messages APIs say input and output, and the Messages API counts cached input apart from `input_tokens`."""
    if not isinstance(u, dict):
        return 0, 0
    if "prompt_tokens" in u or "completion_tokens" in u:
        return _count(u.get("prompt_tokens")), _count(u.get("completion_tokens"))
    given = sum(_count(u.get(k)) for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
    return min(given, MAX_TOKENS), _count(u.get("output_tokens"))


def _event_usage(event: object) -> object:
    """A stream event's usage: at its top (chat, completions; the Messages API's message_delta), or in the object
    it carries (the Responses API's response.completed, the Messages API's message_start)."""
    if not isinstance(event, dict):
        return None
    if event.get("usage"):
        return event["usage"]
    for inner in (event.get("response"), event.get("message")):
        if isinstance(inner, dict) and inner.get("usage"):
            return inner["usage"]
    return None


def usage_from_body(body: bytes) -> tuple[int, int]:
    """(prompt_tokens, completion_tokens) from a whole response body, or zeros.

    Engines put `usage` last; decoding from there costs the same for a chat answer and a megabyte of
    embeddings. A body where that fails is parsed whole.
    """
    at = body.rfind(b'"usage"')
    if at < 0:
        return 0, 0
    plain = _PLAIN_USAGE.match(body, at)
    # a key given twice is read as the decoder reads it (the last): decoded
    if plain is not None and body.count(b'"prompt_tokens"', at) == 1 and body.count(b'"completion_tokens"', at) == 1:
        return min(int(plain[1]), MAX_TOKENS), min(int(plain[2]), MAX_TOKENS)
    colon = body.find(b":", at)
    try:
        value, _ = _DECODER.raw_decode(body[colon + 1 :].decode().lstrip())
        return _counts(value)
    except (ValueError, UnicodeDecodeError, RecursionError):
        pass
    try:
        whole = json.loads(body)
    except (ValueError, RecursionError):
        return 0, 0
    return _counts(whole.get("usage") if isinstance(whole, dict) else None)


class StreamUsage:
    """Watches an SSE stream for the usage chunk, across reads that split lines.

    With `strip`, the usage-only chunk (asked for by the router, not by the client) is kept from the client. With
    `limit` (the tokens the request reserved), `over` says once the engine sent more events than that: each event
    carries a token at least, and the reservation also counts the request's bytes, which cover the few events
    that carry none (a role, a finish, the usage). What feed returns then ends before the first event past it.
    """

    def __init__(self, strip: bool, now: Callable[[], float] | None = None, limit: int = 0) -> None:
        self.strip = strip
        # with `strip`: the event that ends the choices (its finish_reason given), held back until the usage event
        # it precedes, whose other fields (llama.cpp's `timings`) it then carries, as the engine puts them on it
        # when usage is not asked for; released as it is at [DONE] or at the stream's end (rest())
        self.held: bytes | None = None
        self.limit = limit
        self.now = now  # when given, first_at and last_at say when tokens arrived
        self.first_at: float | None = None
        self.last_at: float | None = None
        self.tail = b""
        self.usage: tuple[int, int] | None = None
        self.events = 0  # data events relayed: about one per generated token
        self.done = False  # the engine's [DONE] went by: the answer was whole, whatever happens to the connection
        self.over = False

    def _cut(self, chunk: bytes, before: int, complete: bytes) -> bytes:
        """`chunk` up to the first event past the limit (`before`: bytes of `complete` the client had already)."""
        self.over = True
        at = -1
        for _ in range(self.limit - self.events + 1):
            at = complete.find(b"data: {", at + 1)
        self.events = self.limit
        return chunk[: max(0, at - before)]

    def so_far(self) -> tuple[int, int]:
        """The engine's own count once it sent one; before that (a stream cut short) the events relayed, as the
        completion tokens seen so far: an engine sends about one per token."""
        return self.usage if self.usage is not None else (0, self.events)

    def rest(self) -> bytes:
        """What is still held back (the stream ended without the usage event): the client's, as it was."""
        held, self.held = self.held, None
        return held + b"\n\n" if held is not None else b""

    def _hold_finish(self, chunk: bytes, complete: bytes) -> bytes:
        """`chunk` without the event that ends the choices, held back (only one read wholly within this one)."""
        for line in complete.split(b"\n"):
            if (line.startswith(b"data: {") and b'"finish_reason"' in line and b'"finish_reason":null' not in line
                    and b'"finish_reason": null' not in line and line + b"\n\n" in chunk and self.held is None):
                self.held = line
                return chunk.replace(line + b"\n\n", b"", 1)
        return chunk

    def _with_extras(self, usage_event: dict[str, object]) -> bytes:
        """The held finish event with the usage event's own fields (not its usage, choices or ids) put on it."""
        held, self.held = self.held, None
        assert held is not None
        extras = {k: v for k, v in usage_event.items() if k not in _USAGE_EVENT_FIELDS}
        if not extras:
            return held + b"\n\n"
        try:
            event = json.loads(held[6:])
        except (ValueError, RecursionError):
            return held + b"\n\n"
        if not isinstance(event, dict):
            return held + b"\n\n"
        return b"data: " + json.dumps({**event, **extras}, separators=(",", ":")).encode() + b"\n\n"

    def feed(self, chunk: bytes) -> bytes:
        """Look at one read; return what the client should get of it."""
        data = self.tail + chunk if self.tail else chunk
        nl = data.rfind(b"\n")
        complete, self.tail = (data[: nl + 1], data[nl + 1 :]) if nl >= 0 else (b"", data)
        events = complete.count(b"data: {")
        if events and self.now is not None:
            self.last_at = self.now()
            if self.first_at is None:
                self.first_at = self.last_at
        if 0 < self.limit < self.events + events:
            return self._cut(chunk, len(data) - len(chunk), complete)
        self.events += events
        if self.strip and b'"finish_reason"' in complete:
            chunk = self._hold_finish(chunk, complete)
        if b"data: [DONE]" in complete:
            self.done = True
        if b'"usage"' in complete:
            chunk = self._usage(chunk, complete)
        if self.held is not None and b"data: [DONE]" in chunk:  # no usage event came: the finish as it was
            chunk = chunk.replace(b"data: [DONE]", self.rest() + b"data: [DONE]", 1)
        return chunk

    def _usage(self, chunk: bytes, complete: bytes) -> bytes:
        """The engine's counts read from the usage events of `complete`; `chunk` without the usage-only event when
        the client did not ask for it (its other fields moved onto the held finish event)."""
        drop: bytes | None = None
        dropped: dict[str, object] = {}
        for line in complete.split(b"\n"):
            if not line.startswith(b"data: {") or b'"usage"' not in line:
                continue
            if any(n in line for n in _NULL_USAGE):
                continue  # every chunk carries "usage":null once usage is asked for: nothing to parse
            try:
                event = json.loads(line[6:])
            except (ValueError, RecursionError):
                continue
            u = _event_usage(event)
            if u:
                # counts only grow: some engines repeat them with every chunk, and the Messages API sends the input
                # at the start and the output at the end
                p, c = _counts(u)
                self.usage = (p, c) if self.usage is None else (max(p, self.usage[0]), max(c, self.usage[1]))
                if self.strip and isinstance(event, dict) and not event.get("choices"):
                    drop, dropped = line, event
        if drop is not None and drop + b"\n" in chunk:
            put = self._with_extras(dropped) if self.held is not None else b""
            chunk = chunk.replace(drop + b"\n\n", put, 1) if drop + b"\n\n" in chunk else chunk.replace(
                drop + b"\n", put, 1)
        return chunk
