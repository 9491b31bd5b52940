"""Request bodies being read, per key, before anything of the request is admitted.

A request's limits are checked once its body is read (what it reserves depends on the body), so a key with
`concurrency: 1` could hold as many connections as it liked, each trickling a body in. A key may therefore have
no more bodies arriving at once than its concurrency (per router process); beyond, the request is refused before
its body is read, and its connection closed.
"""

from __future__ import annotations

from collections import Counter

from aiohttp import web

from llmgw.router.errors import openai_error


class KeyUploads:
    def __init__(self) -> None:
        self.reading: Counter[str] = Counter()

    def take(self, key_id: str, concurrency: int | None) -> bool:
        """Whether the key may start reading another body now (it then holds a place until give())."""
        if concurrency is not None and self.reading[key_id] >= concurrency:
            return False
        self.reading[key_id] += 1
        return True

    def give(self, key_id: str) -> None:
        self.reading[key_id] -= 1
        if self.reading[key_id] <= 0:
            del self.reading[key_id]


def too_many_uploads(concurrency: int | None) -> web.Response:
    resp = openai_error(
        429, f"this API key already has {concurrency} request body(ies) arriving (its concurrency): wait for them",
        "requests", "rate_limit_exceeded", headers={"Retry-After": "1"},
    )
    resp.force_close()  # its body is not read: the connection cannot carry another request
    return resp
