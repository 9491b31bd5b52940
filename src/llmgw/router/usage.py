"""Usage per request: buffered in memory, flushed to the store in batches so the hot path does no I/O."""

from __future__ import annotations

import json


def usage_from_body(body: bytes) -> tuple[int, int]:
    """(prompt_tokens, completion_tokens) from a whole response body, or zeros."""
    if b'"usage"' not in body:
        return 0, 0
    try:
        u = json.loads(body).get("usage") or {}
    except (ValueError, AttributeError):
        return 0, 0
    return int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0)


def usage_from_sse(chunk: bytes) -> tuple[int, int] | None:
    """Usage carried by an SSE chunk (the final one, when the engine reports it), else None."""
    found = None
    for line in chunk.split(b"\n"):
        if line.startswith(b"data: {") and b'"usage"' in line:
            try:
                u = json.loads(line[6:]).get("usage")
            except ValueError:
                continue
            if u:
                found = (int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0))
    return found
