"""Errors in the OpenAI envelope: {"error": {"message", "type", "param", "code"}}."""

from __future__ import annotations

import json

from aiohttp import web


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


def sse_error(message: str, code: str) -> bytes:
    """A stream that breaks mid-way ends with an error event, never a silent cut."""
    body = {"error": {"message": message, "type": "upstream_error", "param": None, "code": code}}
    return b"data: " + json.dumps(body).encode() + b"\n\n"
