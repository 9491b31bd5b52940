"""The sim engine's sleep mode, shaped like vLLM's (`--enable-sleep-mode`): POST /sleep?level=N, POST
/wake_up[?tags=weights|kv_cache], GET /is_sleeping, and the two calls of vLLM's level-2 wake, POST /collective_rpc
{"method": "reload_weights"} and POST /reset_prefix_cache. While any part sleeps, the paths that need the weights
answer 503 and the rest answer as usual.

Level 2 is honest, as vLLM's is: it discards the weights, and a wake brings back only their memory. A bare
/wake_up after it says awake and the engine answers 200 with garbage (GARBLED words) until the weights are
reloaded: wake the weights, reload them, wake the KV cache, reset the prefix cache.

The sim has no GPU: the memory it would hold is a number, reported as `gpu_memory_used_bytes` in /is_sleeping's
answer and as the gauge sim:gpu_memory_used_bytes, so the agent can check that a sleep really freed it. A planted
leak keeps `leak_bytes` held after a level-1 sleep (engines leak); level 2 drops everything, unless the leak
is deep too.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from aiohttp import web

NEEDS_WEIGHTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")
TAGS = ("weights", "kv_cache")  # vLLM's sleep tags (its SLEEP_TAGS)
GARBLED = "!"  # what a model whose weights are gone says, word after word (vLLM's zeroed weights: token 0)


@dataclass(frozen=True)
class SleepMode:
    enabled: bool = False
    wake_seconds: float = 0.0  # a level-1 wake: the weights back from host memory
    reload_seconds: float = 0.0  # a level-2 wake: the weights were dropped and are read again (the load time)
    memory_bytes: int = 1 << 30  # what the engine holds awake
    leak_bytes: int = 0  # still held after a level-1 sleep
    deep_leak: bool = False  # and after a level-2 one: nothing frees it


class Sleeper:
    """One engine's sleep state, with the routes that change it and the middleware that honours it."""

    def __init__(self, mode: SleepMode) -> None:
        self.mode = mode
        self.level = 0  # the level of the last sleep; 0: awake
        self.asleep: set[str] = set()  # the tags still asleep
        self.weights_lost = False  # a level-2 sleep discarded them; only reload_weights brings them back
        self._waking = asyncio.Lock()

    @property
    def sleeping(self) -> bool:
        return bool(self.asleep)

    @property
    def garbled(self) -> bool:
        """Awake with no weights: it answers, wrongly."""
        return self.weights_lost and not self.sleeping

    @property
    def used_bytes(self) -> int:
        if not self.sleeping:
            return self.mode.memory_bytes
        return self.mode.leak_bytes if self.level == 1 or self.mode.deep_leak else 0

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/sleep", self.sleep)
        app.router.add_post("/wake_up", self.wake_up)
        app.router.add_get("/is_sleeping", self.is_sleeping)
        app.router.add_post("/collective_rpc", self.collective_rpc)
        app.router.add_post("/reset_prefix_cache", self.reset_prefix_cache)

    async def sleep(self, request: web.Request) -> web.Response:
        if not self.mode.enabled:
            return _not_enabled()
        raw = request.query.get("level", "1")
        if raw not in ("1", "2"):
            return _refused(400, f"level must be 1 or 2, got {raw[:20]!r}")
        async with self._waking:
            # deeper only: a level-1 sleeper asked for level 2 drops what it still held
            self.level = max(self.level, int(raw))
            self.asleep = set(TAGS)
            self.weights_lost = self.weights_lost or self.level == 2
        return web.json_response({"status": "sleeping", "level": int(raw)})

    async def wake_up(self, request: web.Request) -> web.Response:
        if not self.mode.enabled:
            return _not_enabled()
        tags = request.query.getall("tags", []) or list(TAGS)
        if any(t not in TAGS for t in tags):
            return _refused(400, f"tags must be among {', '.join(TAGS)}")
        async with self._waking:  # one wake at a time: a second caller waits for the first to finish
            if "weights" in tags and "weights" in self.asleep and self.level == 1:
                await asyncio.sleep(self.mode.wake_seconds)  # the weights back from host memory
            self.asleep -= set(tags)
            if not self.sleeping:
                self.level = 0
        return web.json_response({"status": "sleeping" if self.sleeping else "awake", "tags": tags})

    async def collective_rpc(self, request: web.Request) -> web.Response:
        if not self.mode.enabled:
            return _not_enabled()
        try:
            body = json.loads(await request.read())
        except ValueError:
            return _refused(400, "the body must be JSON")
        method = body.get("method") if isinstance(body, dict) else None
        if method != "reload_weights":
            return _refused(400, f"the sim knows only the method reload_weights, not {str(method)[:40]!r}")
        async with self._waking:
            if "weights" in self.asleep:  # vLLM would write into memory it has unmapped
                return _refused(500, "the weights sleep: POST /wake_up?tags=weights first")
            await asyncio.sleep(self.mode.reload_seconds)  # read again from disk: the load time
            self.weights_lost = False
        return web.json_response({"results": [None]})

    async def reset_prefix_cache(self, request: web.Request) -> web.Response:
        return web.json_response({"success": True})

    async def is_sleeping(self, request: web.Request) -> web.Response:
        return web.json_response({"is_sleeping": self.sleeping, "level": self.level if self.sleeping else 0,
                                  "gpu_memory_used_bytes": self.used_bytes})

    def metrics(self) -> str:
        return ("# HELP sim:gpu_memory_used_bytes The GPU memory the engine would hold now.\n"
                "# TYPE sim:gpu_memory_used_bytes gauge\n"
                f"sim:gpu_memory_used_bytes {self.used_bytes}\n")

    def middleware(self) -> Any:
        @web.middleware
        async def mw(request: web.Request, handler: Any) -> web.StreamResponse:
            if self.sleeping and request.path in NEEDS_WEIGHTS:
                return _refused(503, "the model is sleeping: POST /wake_up first")
            return await handler(request)  # type: ignore[no-any-return]

        return mw


def _not_enabled() -> web.Response:
    return _refused(400, "sleep mode is not enabled: start the engine with --enable-sleep-mode")


def _refused(status: int, words: str) -> web.Response:
    kind = "unavailable_error" if status == 503 else "invalid_request_error"
    return web.json_response({"error": {"message": words, "type": kind, "code": status}}, status=status)
