"""Errors in the OpenAI envelope: {"error": {"message", "type", "param", "code"}}; on Anthropic's Messages API in
its own: {"type": "error", "error": {"type", "message"}}, with llmgw's code kept beside them."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from llmgw.net.replies import message_of

log = logging.getLogger(__name__)
MESSAGES = "/v1/messages"  # Anthropic's: its clients read errors in Anthropic's envelope
RETRY_AFTER_S = 10  # what a refusal that passes with time tells the client to wait


def openai_error(
    status: int,
    message: str,
    type_: str,
    code: str | None = None,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    return web.Response(status=status, text=json.dumps(body), content_type="application/json", headers=headers)


# Anthropic's error types by status (its API reference); any other 4xx is a bad request, any other 5xx its api_error
ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                   404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                   503: "overloaded_error", 504: "timeout_error"}
MAX_ERROR_BYTES = 64 * 1024  # an error body larger than this is an engine's own, passed as it is


def as_anthropic(resp: web.StreamResponse) -> web.StreamResponse:
    """An error in the OpenAI envelope (the router's own, or an engine's) rewritten into Anthropic's; anything else
    as it is (a stream begun, an engine already answering in Anthropic's envelope)."""
    if resp.status < 400 or not isinstance(resp, web.Response) or resp.prepared:
        return resp
    body = resp.body
    if not isinstance(body, bytes) or len(body) > MAX_ERROR_BYTES:
        return resp
    try:
        err = json.loads(body).get("error")
    except (ValueError, AttributeError, RecursionError):
        return resp
    if not isinstance(err, dict) or not isinstance(err.get("message"), str):
        return resp
    kind = ANTHROPIC_TYPES.get(resp.status, "api_error" if resp.status >= 500 else "invalid_request_error")
    out = {"type": kind, "message": err["message"]}
    if isinstance(err.get("code"), str):
        out["code"] = err["code"]
    resp.body = json.dumps({"type": "error", "error": out}).encode()
    return resp


def sse_error(message: str, code: str) -> bytes:
    """A stream that breaks mid-way ends with an error event, never a silent cut."""
    body = {"error": {"message": message, "type": "upstream_error", "param": None, "code": code}}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def unsupported(model: str, path: str, why: str) -> web.Response:
    return openai_error(404, f"the model '{model}' does not serve {path} ({why})", "invalid_request_error",
                        "unsupported_endpoint", "model")


@web.middleware
async def openai_envelope(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """aiohttp's own refusals (unknown path, wrong method) and unexpected failures, in the OpenAI envelope too; every
    error on Anthropic's path in Anthropic's."""
    try:
        resp = await handler(request)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        code = {404: "not_found", 405: "method_not_allowed", 408: "request_timeout", 413: "body_too_large"}.get(
            e.status, "http_error"
        )
        resp = openai_error(e.status, message_of(request, e), "invalid_request_error", code)
    except ConnectionError:  # the client went away: nobody to answer, and no failure of ours
        raise
    except Exception:
        log.exception("unexpected failure serving %s %s", request.method, request.path)
        resp = openai_error(500, "internal error in the router; it is logged", "server_error", "internal_error")
    return as_anthropic(resp) if request.path.startswith(MESSAGES) else resp
