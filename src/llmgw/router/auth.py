"""Authenticate: the API key a request presents, checked against keys read again when the control plane says
they changed."""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from llmgw.core.errors import StoreError
from llmgw.router.errors import RETRY_AFTER_S, openai_error
from llmgw.router.keys import KeyRing
from llmgw.router.state import KeyVersions
from llmgw.store.base import ApiKeyRecord

log = logging.getLogger(__name__)

ANONYMOUS = ApiKeyRecord(id="-", name="anonymous", prefix="", hash="", created_at=0.0)


class Authenticator:
    def __init__(self, state: KeyVersions, keys: KeyRing, required: bool) -> None:
        self.state = state
        self.keys = keys
        self.required = required  # router.auth: off, every request is ANONYMOUS
        self.version = -1  # the control plane's keys_version the ring was last read at
        self._lock = asyncio.Lock()

    def stale(self) -> bool:
        """Whether the keys changed since they were read (the common case costs no coroutine)."""
        return self.state.keys_version() != self.version

    async def reload(self) -> web.Response | None:
        """Keys read again, off the event loop (a store read can stall on a busy disk), once however many requests
        notice at the same moment; the answer to give while they cannot be read (no key is trusted meanwhile)."""
        try:
            async with self._lock:
                version = self.state.keys_version()  # again: a reload done while this waited may be recent enough
                if version != self.version:
                    await asyncio.to_thread(self.keys.reload)
                    self.version = version
        except StoreError as e:
            log.warning("API keys changed and cannot be read again: %s", e)
            return openai_error(503, "API keys cannot be checked now: the store is unreachable; try again shortly",
                                "server_error", "store_unavailable", headers={"Retry-After": str(RETRY_AFTER_S)})
        return None

    def check(self, request: web.Request) -> ApiKeyRecord | web.Response:
        """The key's record, or the 401 that refuses the request."""
        if not self.required:
            return ANONYMOUS
        raw = presented_key(request)
        if raw is None:
            return openai_error(401, "missing API key: send 'Authorization: Bearer <key>' (or 'x-api-key: <key>')",
                                "invalid_request_error", "missing_api_key")
        key = self.keys.check(raw)
        if key is None:
            return openai_error(401, "invalid or revoked API key", "invalid_request_error", "invalid_api_key")
        return key


def presented_key(request: web.Request) -> str | None:
    """The key a request presents: OpenAI's clients send `Authorization: Bearer`, Anthropic's `x-api-key` (the same
    keys, checked the same way, on every path). The bearer header wins where both are sent."""
    header = request.headers.get("Authorization", "")
    if header.startswith("Bearer "):
        return header[7:].strip()
    other = request.headers.get("x-api-key")
    return other.strip() if other is not None else None
