"""Whose fault an engine's error is: the replica's (counted toward its ejection, table.py) or the request's.

An engine answers some requests it cannot take with a 5xx though nothing is wrong with it: llama-server throws a
runtime error (500) for an image or audio part sent to a model loaded without a projector, and for a chat its
template cannot render. Counted as the replica's failures, any key could take healthy replicas out of routing
(12 such requests ejected one replica 4 times, for 30 to 120 s). The rule, one place:

| what the engine answered | whose fault | what the client gets |
|---|---|---|
| 2xx, 3xx, 4xx | nobody's (a 4xx: the client's, relayed) | the engine's answer |
| 404 whose error names something of the request (an unknown model or adapter) | the request's | 404, its words |
| 404 saying only "Not Found", 405, 501 (NOT_SERVED) | nobody's: the path is not served there | 404 naming the path |
| 5xx whose error names the request's content (REQUEST_FAULTS) | the request's | 400 `unsupported_content`, its words |
| any other 5xx, a timeout, a break after the request was sent | the replica's | its answer, or 502/504 |
"""

from __future__ import annotations

import json

# (what an engine's error message says, what it means): matched in the error's message, lowercased
REQUEST_FAULTS: tuple[tuple[str, str], ...] = (
    ("image input is not supported", "the model reads no images"),  # llama-server without --mmproj
    ("audio input is not supported", "the model reads no audio"),
    ("video input is not supported", "the model reads no video"),
    ("failed to load image or audio file", "a media part could not be read"),  # llama-server's mtmd
    ("conversation roles must alternate", "the model's chat template refused the conversation"),
    ("chat template", "the model's chat template refused the conversation"),
)
MAX_WORDS = 600  # of the engine's message passed on to the client
# what engines' 404s for a path they have no route for say: aiohttp's and FastAPI's (vLLM, SGLang), llama-server's
ROUTE_NOT_FOUND = frozenset({"not found", "404: not found", "file not found"})


def engine_message(body: bytes) -> str:
    """The message of an engine's error envelope ({"error": {"message"}} or {"error": "..."}, {"detail"}, or
    {"message"}), or "" when the body says none."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return ""
    if not isinstance(data, dict):
        return ""
    err = data.get("error", data)
    if isinstance(err, str):
        return err
    if isinstance(err, dict):
        for field in ("message", "detail"):
            if isinstance(err.get(field), str):
                return str(err[field])
    return ""


def request_fault(status: int, body: bytes) -> str | None:
    """The engine's words when a 5xx it gave is the request's fault; None when it is the replica's (or no 5xx)."""
    if status < 500 or not body:
        return None
    message = engine_message(body)
    lowered = message.lower()
    for words, _ in REQUEST_FAULTS:
        if words in lowered:
            return message[:MAX_WORDS]
    return None


def not_found_about_request(body: bytes) -> str | None:
    """The engine's words when its 404 is about something the request names (vLLM's "The model `x` does not
    exist." for an adapter it has not loaded), which the client should see as it is; None for a 404 that says only
    that the path has no route, or says nothing readable (the path is then not served there)."""
    message = engine_message(body)
    if not message.strip() or message.strip().lower() in ROUTE_NOT_FOUND:
        return None
    return message[:MAX_WORDS]
