"""Request bodies being read, per key, before anything of the request is admitted, and the bytes of bodies this
router process holds at once.

A request's limits are checked once its body is read (what it reserves depends on the body), so a key with
`concurrency: 1` could hold as many connections as it liked, each trickling a body in. A key may therefore have
no more bodies arriving at once than its concurrency, or `router.key_uploads` for a key without one (per router
process); beyond, the request is refused before its body is read, and its connection closed.

The count of bodies does not bound their bytes, and keys are many: every request also holds, from before its body
is read until it ends, its share of `router.body_budget`, the bytes of bodies the process may hold at once across
all keys. A body counts at its stated length, and at the body limit when its length is not stated (chunked);
beyond the budget, 503 at once, before a byte of the body is read. (A compressed body is refused before it gets
here, net/guards.py: a few KB of gzip inflate to the whole limit.)
"""

from __future__ import annotations

from collections import Counter

from aiohttp import web

from llmgw.router.errors import openai_error


class KeyUploads:
    def __init__(self, default: int) -> None:
        self.reading: Counter[str] = Counter()
        self.default = default  # for a key without a concurrency limit

    def take(self, key_id: str, concurrency: int | None) -> bool:
        """Whether the key may start reading another body now (it then holds a place until give())."""
        if self.reading[key_id] >= (concurrency if concurrency is not None else self.default):
            return False
        self.reading[key_id] += 1
        return True

    def give(self, key_id: str) -> None:
        self.reading[key_id] -= 1
        if self.reading[key_id] <= 0:
            del self.reading[key_id]


class BodyBudget:
    """Bytes of request bodies this process holds at once, across keys."""

    def __init__(self, limit: int, max_body: int) -> None:
        self.limit, self.max_body, self.held = limit, max_body, 0

    def counted(self, request: web.BaseRequest) -> int:
        """What `request`'s body may grow to in memory: its stated length, or the body limit when it states none."""
        if request.content_length is not None:
            return min(request.content_length, self.max_body)
        return self.max_body

    def take(self, n: int) -> bool:
        if self.held + n > self.limit:
            return False
        self.held += n
        return True

    def give(self, n: int) -> None:
        self.held -= n


def too_many_uploads(concurrency: int | None, default: int) -> web.Response:
    which = (f"{concurrency} request body(ies) arriving (its concurrency)" if concurrency is not None else
             f"{default} request body(ies) arriving (the most for a key without a concurrency limit)")
    resp = openai_error(429, f"this API key already has {which}: wait for them", "requests", "rate_limit_exceeded",
                        headers={"Retry-After": "1"})
    resp.force_close()  # its body is not read: the connection cannot carry another request
    return resp


def bodies_full(budget: BodyBudget) -> web.Response:
    resp = openai_error(503, f"this server holds as many request bodies as it may at once ({budget.limit} bytes; one "
                             f"of unstated length counts as {budget.max_body}): try again shortly", "server_error",
                        "server_busy", headers={"Retry-After": "1"})
    resp.force_close()  # its body is not read
    return resp
