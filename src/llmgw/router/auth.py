"""Authenticate: the API key a request presents, checked against the keys this router knows. Keys this process
wrote are known at once; keys changed elsewhere (another server, or the control plane of a router worker) are read
again, once however many requests notice, and a request waits for that read a short while at most (router/reread.py).

While the keys cannot be read (the store is away or slow), requests are checked against the keys known: a key known
live is served, one known revoked is refused 401, and one not known cannot be checked: 503 store_unavailable, not a
401 that would call a key made elsewhere invalid. A revocation made elsewhere counts once it is read: one read before
the store went away holds; one not yet read does not until the store answers (serving outlives the store)."""

from __future__ import annotations

import asyncio

from aiohttp import web

from llmgw.core.clock import Clock
from llmgw.router.errors import RETRY_AFTER_S, openai_error
from llmgw.router.keys import KeyRing
from llmgw.router.reread import Reread
from llmgw.router.state import KeyVersions
from llmgw.store.base import ApiKeyRecord

ANONYMOUS = ApiKeyRecord(id="-", name="anonymous", prefix="", hash="", created_at=0.0)


class Authenticator:
    def __init__(self, state: KeyVersions, keys: KeyRing, required: bool, clock: Clock) -> None:
        self.state = state
        self.keys = keys
        self.required = required  # router.auth: off, every request is ANONYMOUS
        self.version = -1  # the control plane's keys_version the ring is up to date at
        self._learned = -1  # the version of the last key this process wrote that the ring took in (>= version)
        self._reread = Reread(self._read, "API keys", clock)

    def stale(self) -> bool:
        """Whether the keys changed since the ring was brought up to date (the common case costs no coroutine)."""
        return self.state.keys_version() != self.version

    def catch_up(self) -> bool:
        """Whether the ring is up to date: keys this process wrote since are taken in at once (no store read), even
        those after a change elsewhere (a revocation made here holds however the store fares); keys changed
        elsewhere are read in the background (one read at a time)."""
        if not self.stale():
            return True
        written = self.state.keys_since(self.version)
        if written is not None:
            new = [rec for v, rec in written.keys if v > self._learned]
            if new:
                self.keys.learn(new)
                self._learned = written.keys[-1][0]
            self.version = written.through
            if not self.stale():
                return True
        self._reread.start()
        return False

    async def current(self) -> bool:
        """catch_up, and the read it began waited for a short while at most: whether the ring is up to date."""
        if self.catch_up():
            return True
        await self._reread.ask()
        return self.catch_up()

    async def _read(self) -> None:
        version = self.state.keys_version()  # before the read: a change after it is read again
        index = await asyncio.to_thread(self.keys.read)  # off the event loop (a store read can stall on a busy disk)
        self.keys.by_prefix = index  # swapped here, on the loop, as learn() swaps
        # this process's writes after `version` are taken in again (catch_up): the read may have missed them
        self.version = self._learned = version

    def check(self, request: web.Request, current: bool = True) -> ApiKeyRecord | web.Response:
        """The key's record, or the answer that refuses the request: 401 for a key known to be none (or revoked),
        503 for one the keys known do not hold while they are not up to date (`current`)."""
        if not self.required:
            return ANONYMOUS
        raw = presented_key(request)
        if raw is None:
            return openai_error(401, "missing API key: send 'Authorization: Bearer <key>' (or 'x-api-key: <key>')",
                                "invalid_request_error", "missing_api_key")
        key = self.keys.find(raw)
        if key is None and not current:
            return openai_error(503, "this API key cannot be checked now: keys changed and the store cannot be read; "
                                "try again shortly", "server_error", "store_unavailable",
                                headers={"Retry-After": str(RETRY_AFTER_S)})
        if key is None or key.revoked_at is not None:
            return openai_error(401, "invalid or revoked API key", "invalid_request_error", "invalid_api_key")
        return key

    def close(self) -> None:
        self._reread.close()


def presented_key(request: web.Request) -> str | None:
    """The key a request presents: OpenAI's clients send `Authorization: Bearer`, Anthropic's `x-api-key` (the same
    keys, checked the same way, on every path). The bearer header wins where both are sent."""
    header = request.headers.get("Authorization", "")
    if header.startswith("Bearer "):
        return header[7:].strip()
    other = request.headers.get("x-api-key")
    return other.strip() if other is not None else None
