"""The sim engine's sleep mode, shaped like vLLM's (`--enable-sleep-mode`): POST /sleep?level=N, POST /wake_up,
GET /is_sleeping. While asleep, the paths that need the weights answer 503 and the rest answer as usual.

The sim has no GPU: the memory it would hold is a number, reported as `gpu_memory_used_bytes` in /is_sleeping's
answer and as the gauge sim:gpu_memory_used_bytes, so the agent can check that a sleep really freed it. A planted
leak keeps `leak_bytes` held after a level-1 sleep (engines leak); level 2 drops everything, unless the leak
is deep too.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from aiohttp import web

NEEDS_WEIGHTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")


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
        self.level = 0  # 0: awake
        self._waking = asyncio.Lock()

    @property
    def used_bytes(self) -> int:
        if self.level == 0:
            return self.mode.memory_bytes
        return self.mode.leak_bytes if self.level == 1 or self.mode.deep_leak else 0

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/sleep", self.sleep)
        app.router.add_post("/wake_up", self.wake_up)
        app.router.add_get("/is_sleeping", self.is_sleeping)

    async def sleep(self, request: web.Request) -> web.Response:
        if not self.mode.enabled:
            return _refused(400, "sleep mode is not enabled: start the engine with --enable-sleep-mode")
        raw = request.query.get("level", "1")
        if raw not in ("1", "2"):
            return _refused(400, f"level must be 1 or 2, got {raw[:20]!r}")
        async with self._waking:
            # deeper only: a level-1 sleeper asked for level 2 drops what it still held
            self.level = max(self.level, int(raw))
        return web.Response(status=200)

    async def wake_up(self, request: web.Request) -> web.Response:
        if not self.mode.enabled:
            return _refused(400, "sleep mode is not enabled: start the engine with --enable-sleep-mode")
        async with self._waking:  # one wake at a time: a second caller waits for the first to finish
            if self.level:
                await asyncio.sleep(self.mode.wake_seconds if self.level == 1 else self.mode.reload_seconds)
                self.level = 0
        return web.Response(status=200)

    async def is_sleeping(self, request: web.Request) -> web.Response:
        return web.json_response({"is_sleeping": self.level > 0, "level": self.level,
                                  "gpu_memory_used_bytes": self.used_bytes})

    def metrics(self) -> str:
        return ("# HELP sim:gpu_memory_used_bytes The GPU memory the engine would hold now.\n"
                "# TYPE sim:gpu_memory_used_bytes gauge\n"
                f"sim:gpu_memory_used_bytes {self.used_bytes}\n")

    def middleware(self) -> Any:
        @web.middleware
        async def mw(request: web.Request, handler: Any) -> web.StreamResponse:
            if self.level and request.path in NEEDS_WEIGHTS:
                return _refused(503, "the model is sleeping: POST /wake_up first")
            return await handler(request)  # type: ignore[no-any-return]

        return mw


def _refused(status: int, words: str) -> web.Response:
    kind = "unavailable_error" if status == 503 else "invalid_request_error"
    return web.json_response({"error": {"message": words, "type": kind, "code": status}}, status=status)
