"""GET /v1/usage: what a key used, read with that key: its requests, tokens, GPU time and cost, by day or hour and
optionally by model, in the shape of OpenAI's usage API (a page of time buckets, each with results). Only the
asking key's rows are read; no key can name another.

Query: `start_time` (Unix seconds; default: the last 7 days, today's included), `end_time` (default: the end of
the bucket holding now), `bucket_width` `1d` (default) or
`1h`, `group_by=model`. Tokens come from the hourly usage aggregates (a request counted once its usage is flushed,
within seconds); GPU-seconds and cost from chargeback's hourly charges, which land once a window has settled
(`chargeback.settle_after`, 15 minutes by default) and carry the cost at the rates of their time (0 where no rate is
set). Each result also says `gpu_seconds_busy`, `_load` and `_idle` (docs/tenants.md, "Chargeback").
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from llmgw.core.clock import Clock
from llmgw.core.errors import StoreError
from llmgw.records.chargeback import ChargeRow
from llmgw.router.errors import openai_error
from llmgw.store.base import HOUR, Store, UsageTotal

log = logging.getLogger(__name__)

WIDTHS = {"1d": 86400, "1h": 3600}
MAX_BUCKETS = {"1d": 93, "1h": 24 * 14}  # a quarter by day, two weeks by hour
DEFAULT_DAYS = 7


@dataclass
class _Result:
    requests: int = 0
    prompt: int = 0
    completion: int = 0
    busy: float = 0.0
    load: float = 0.0
    idle: float = 0.0
    cost: float = 0.0

    def shown(self, model: str | None, currency: str) -> dict[str, Any]:
        return {"object": "llmgw.usage.result", "model": model, "num_model_requests": self.requests,
                "input_tokens": self.prompt, "output_tokens": self.completion,
                "gpu_seconds": round(self.busy + self.load + self.idle, 3), "gpu_seconds_busy": round(self.busy, 3),
                "gpu_seconds_load": round(self.load, 3), "gpu_seconds_idle": round(self.idle, 3),
                "cost": {"value": round(self.cost, 6), "currency": currency}}


@dataclass
class _Bucket:
    start: int
    end: int
    results: dict[str | None, _Result] = field(default_factory=dict)


@dataclass(frozen=True)
class Asked:
    start: int
    end: int
    width: int
    by_model: bool


def asked(query: Any, now: float) -> Asked | web.Response:
    """The query's window, or the 400 that says what is wrong with it."""
    width_name = query.get("bucket_width", "1d")
    if width_name not in WIDTHS:
        return _bad(f"bucket_width must be one of {', '.join(WIDTHS)}", "bucket_width")
    width = WIDTHS[width_name]
    group = query.get("group_by", "")
    if group not in ("", "model"):
        return _bad("group_by may only be model", "group_by")
    try:
        # by default through the end of the bucket holding now: the hour under way is counted in it
        end = int(query["end_time"]) if "end_time" in query else (int(now) // width + 1) * width
        start = int(query["start_time"]) if "start_time" in query else end - DEFAULT_DAYS * 86400
    except ValueError:
        return _bad("start_time and end_time are Unix seconds", "start_time")
    start = max(0, start - start % width)  # whole buckets, as OpenAI's are
    if not 0 <= start < end <= 2**40:
        return _bad("start_time must be before end_time", "start_time")
    if math.ceil((end - start) / width) > MAX_BUCKETS[width_name]:
        return _bad(f"at most {MAX_BUCKETS[width_name]} buckets of {width_name} at once", "start_time")
    return Asked(start, end, width, group == "model")


def _bad(words: str, param: str) -> web.Response:
    return openai_error(400, words, "invalid_request_error", "invalid_value", param)


def page(a: Asked, usage: Iterable[tuple[int, UsageTotal]], charges: Iterable[ChargeRow],
         currency: str) -> dict[str, Any]:
    """The buckets of [a.start, a.end) with what each hour's rows put in them."""
    buckets = [_Bucket(t, min(t + a.width, a.end)) for t in range(a.start, a.end, a.width)]

    def result(hour: int, model: str) -> _Result | None:
        at = hour * HOUR
        if not a.start <= at < a.end:
            return None
        b = buckets[(at - a.start) // a.width]
        return b.results.setdefault(model if a.by_model else None, _Result())

    for hour, u in usage:
        if (r := result(hour, u.model)) is not None:
            r.requests += u.requests
            r.prompt += u.prompt_tokens
            r.completion += u.completion_tokens
    for c in charges:
        if (r := result(c.hour, c.model)) is not None:
            r.busy, r.load, r.idle, r.cost = r.busy + c.busy_s, r.load + c.load_s, r.idle + c.idle_s, r.cost + c.cost
    data = [{"object": "bucket", "start_time": b.start, "end_time": b.end,
             "results": [r.shown(m, currency) for m, r in sorted(b.results.items(), key=lambda kv: kv[0] or "")]}
            for b in buckets]
    return {"object": "page", "data": data, "has_more": False, "next_page": None}


class OwnUsage:
    """Reads one key's rows from the store (off the event loop) for GET /v1/usage."""

    def __init__(self, store: Store, clock: Clock, currency: str) -> None:
        self.store, self.clock, self.currency = store, clock, currency

    async def answer(self, request: web.Request, key_id: str) -> web.Response:
        a = asked(request.query, self.clock.now())
        if isinstance(a, web.Response):
            return a
        try:
            store = self.store
            usage, charges = await asyncio.to_thread(lambda: (
                store.key_usage_by_hour(key_id, a.start, a.end), store.key_charges_since(key_id, a.start, a.end)))
        except StoreError as e:  # the store's words (its address, its file) are the operator's
            log.warning("GET /v1/usage: %s", e)
            return openai_error(503, "usage cannot be read now: try again shortly", "service_unavailable",
                                "store_unavailable", headers={"Retry-After": "10"})
        return web.json_response(page(a, usage, charges, self.currency))
