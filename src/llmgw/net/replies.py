"""The plain error envelope of llmgw's own HTTP listeners, `{"error": "..."}`, shared with the router (which answers
in OpenAI's envelope and rewrites these refusals into it)."""

from __future__ import annotations

import json

from aiohttp import web


def refusal(cls: type[web.HTTPException], message: str, **more: int) -> web.HTTPException:
    """An HTTP error to raise, its body the plain envelope (`more`: what the class asks besides, as 413's sizes)."""
    return cls(**more, text=json.dumps({"error": message}), content_type="application/json")  # type: ignore[arg-type]


def in_plain(e: web.HTTPException, message: str) -> web.HTTPException:
    """The same error, its body now the plain envelope."""
    e.text = json.dumps({"error": message})
    e.content_type = "application/json"
    return e


def message_of(request: web.BaseRequest, e: web.HTTPException) -> str:
    """What an HTTP error says: the plain envelope's message when it carries one, else the request and the reason
    phrase (aiohttp's own refusals: no route, wrong method)."""
    if e.content_type == "application/json" and e.text:
        try:
            said = json.loads(e.text).get("error")
        except (ValueError, AttributeError):
            said = None
        if isinstance(said, str):
            return said
    return f"{request.method} {request.path}: {e.reason}"
