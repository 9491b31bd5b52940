"""The management API's keys and usage: keys with their limits and their use against them, a key's limits changed,
usage by key or model since a time, and an hourly CSV of it for chargeback."""

from __future__ import annotations

import json
import re
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from llmgw.config.adapters import catalog_names
from llmgw.config.loader import describe
from llmgw.config.server import ModelSpec
from llmgw.control.chargeback.charge_views import OPERATOR_NAME, requests_csv, usage_csv, usage_rows
from llmgw.control.storage.storage import Storage
from llmgw.control.tenants.credentials import Credentials
from llmgw.control.tenants.limit_counters import LimitCounters
from llmgw.core.limits import KeyLimits
from llmgw.store.base import ApiKeyRecord

DAY = 86400.0
MAX_SINCE = 400 * DAY


class BadRequest(Exception):
    """The client's mistake: answered 400 with these words, nothing changed (admin_api's middleware)."""


async def json_body(request: web.Request) -> Any:
    try:
        return json.loads(await request.read())
    except (ValueError, RecursionError):
        raise BadRequest("the body is not valid JSON") from None


def js(data: object, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(data, default=str), status=status, content_type="application/json")


def limits_of(body: dict[str, Any]) -> KeyLimits | None:
    raw = body.get("limits")
    if raw is None:
        return None
    try:
        return KeyLimits.model_validate(raw)
    except ValidationError as e:
        raise BadRequest("limits: " + "; ".join(describe(e)[:5])) from None


REQUESTS_DEFAULT = 100_000  # rows of the per-request export, unless `limit` says otherwise
REQUESTS_MAX = 1_000_000


def since_of(request: web.Request, now: float) -> float:
    raw = request.query.get("since", str(int(DAY)))
    if not re.fullmatch(r"[0-9]{1,9}", raw):
        raise BadRequest(f"since must be a whole number of seconds back, not {raw[:20]!r}")
    return now - min(float(raw), MAX_SINCE)


async def key_names(credentials: Credentials, storage: Storage) -> dict[str, str]:
    names = credentials.key_names()
    return names if names is not None else await storage.read(credentials.refresh_key_names)


def key_row(limit_counters: LimitCounters, k: ApiKeyRecord) -> dict[str, Any]:
    return {**k.model_dump(exclude={"hash"}), "use": limit_counters.use_of(k)}


class TenantRoutes:
    """Keys (with their limits and their use against them) and usage, for the management API."""

    def __init__(self, credentials: Credentials, limit_counters: LimitCounters, storage: Storage,
                 models: dict[str, ModelSpec], currency: str = "USD") -> None:
        self.credentials = credentials
        self.limit_counters = limit_counters
        self.storage = storage
        self.models = models  # the catalog: a key may name only its models
        self.currency = currency  # chargeback's: what the costs are in

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/api/keys", self.list_keys),
            web.post("/api/keys", self.create_key),
            web.patch("/api/keys/{id}", self.update_key),
            web.get("/api/usage", self.usage),
            web.get("/api/usage.csv", self.usage_csv),
            web.get("/api/usage/requests.csv", self.requests_csv),
        ]

    async def list_keys(self, _: web.Request) -> web.Response:
        return js([key_row(self.limit_counters, k) for k in await self.storage.read(self.storage.store.list_keys)])

    async def create_key(self, request: web.Request) -> web.Response:
        body = await json_body(request)
        if not isinstance(body, dict):
            raise BadRequest('body must be {"name": ..., "models": [...], "limits": {...}}')
        name, allowed = body.get("name"), body.get("models", [])
        if not isinstance(name, str) or not 1 <= len(name) <= 128 or not isinstance(allowed, list):
            return js({"error": 'body must be {"name": "1-128 characters", "models": [...]}'}, 400)
        if name == OPERATOR_NAME:  # the views name the operator's share so: a key so named would read as it
            return js({"error": f"{OPERATOR_NAME} names the operator's share of GPU time: choose another name"}, 400)
        allowed = [str(m) for m in allowed]
        names = catalog_names(self.models.values())  # a key may be allowed an adapter, as a model
        unknown = [m for m in allowed if m not in names]
        if unknown:
            return js({"error": f"unknown model(s): {', '.join(unknown)}"}, 400)
        raw, rec = await self.credentials.create_key(name, allowed, limits_of(body))
        return js({"key": raw, **rec.model_dump(exclude={"hash"})}, 201)

    async def update_key(self, request: web.Request) -> web.Response:
        """PATCH a key's limits ({"limits": {...}}, or null for the router's default) and/or its models."""
        kid = request.match_info["id"]
        body = await json_body(request)
        if not isinstance(body, dict) or not set(body) <= {"limits", "models"} or not body:
            raise BadRequest('body must be {"limits": {...} or null, "models": [...]}, either or both')
        update: dict[str, Any] = {}
        if "limits" in body:
            update["limits"] = limits_of(body)
        if "models" in body:
            models = body["models"]
            names = catalog_names(self.models.values())
            if not isinstance(models, list) or any(not isinstance(m, str) or m not in names for m in models):
                return js({"error": "models must be a list of the catalog's models"}, 400)
            update["models"] = [str(m) for m in models]
        new = await self.credentials.update_key(kid, update)
        if isinstance(new, str):
            return js({"error": new}, 404 if new.startswith("no key") else 409)
        return js(key_row(self.limit_counters, new))

    async def usage(self, request: web.Request) -> web.Response:
        """Usage since `since` seconds ago (from the hour holding it: the hourly aggregates), by key or model: tokens,
        and GPU-seconds with their cost (the operator's share a row of its own)."""
        by = request.query.get("by", "key")
        if by not in ("key", "model"):
            raise BadRequest("by must be key or model")
        since = since_of(request, self.storage.clock.now())
        names = await key_names(self.credentials, self.storage)
        store = self.storage.store
        totals, charges = await self.storage.read(  # both summed in the store: rows in keys and models, not hours
            lambda: (store.usage_recent(since), store.charges_by_key_model(since)))
        return js({"since": since, "by": by, "currency": self.currency,
                   "rows": usage_rows(totals, charges, by, names)})

    async def usage_csv(self, request: web.Request) -> web.Response:
        """Usage per hour, key and model since `since` seconds ago, GPU time and cost included: what an invoice is
        made from."""
        since = since_of(request, self.storage.clock.now())
        names = await key_names(self.credentials, self.storage)
        store = self.storage.store
        by_hour, charges = await self.storage.read(lambda: (store.usage_by_hour(since), store.charges_since(since)))
        return web.Response(text=usage_csv(by_hour, charges, names, self.currency), content_type="text/csv",
                            headers={"Content-Disposition": 'attachment; filename="llmgw-usage.csv"'})

    async def requests_csv(self, request: web.Request) -> web.Response:
        """Each request since `since` seconds ago, oldest first, at most `limit` (header Llmgw-Truncated when there
        were more: ask again from the last one's time), with its GPU-seconds."""
        now = self.storage.clock.now()
        since = since_of(request, now)
        raw = request.query.get("limit", str(REQUESTS_DEFAULT))
        if not re.fullmatch(r"[0-9]{1,7}", raw) or not 1 <= int(raw) <= REQUESTS_MAX:
            raise BadRequest(f"limit must be a whole number from 1 to {REQUESTS_MAX}, not {raw[:20]!r}")
        limit = int(raw)
        names = await key_names(self.credentials, self.storage)
        rows = await self.storage.read(self.storage.store.usage_requests, since, now + 1, limit)
        more = {"Llmgw-Truncated": "true"} if len(rows) == limit else {}
        return web.Response(text=requests_csv(rows, names), content_type="text/csv",
                            headers={"Content-Disposition": 'attachment; filename="llmgw-requests.csv"', **more})


def key_routes(credentials: Credentials, limit_counters: LimitCounters, storage: Storage,
               models: dict[str, ModelSpec], currency: str = "USD") -> list[web.RouteDef]:
    return TenantRoutes(credentials, limit_counters, storage, models, currency).routes()

