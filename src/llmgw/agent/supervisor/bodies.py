"""What the supervisor reads of an engine's answers: bounded bodies, and a few of their words for a message."""

from __future__ import annotations

from datetime import UTC, datetime

import aiohttp


async def read_capped(content: aiohttp.StreamReader, cap: int) -> bytes:
    """The whole body up to `cap` bytes (read() with a size returns only what has arrived so far)."""
    parts: list[bytes] = []
    size = 0
    while size < cap and (chunk := await content.read(cap - size)):
        parts.append(chunk)
        size += len(chunk)
    return b"".join(parts)


def utc(t: float | None) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if t is not None else "its start"


def words(body: bytes) -> str:
    return body[:300].decode(errors="replace").strip()
