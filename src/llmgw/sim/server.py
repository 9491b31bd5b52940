"""The sim engine's OpenAI-compatible HTTP app; usable in-process as a fast engine stand-in (benchmarks, tests).

Generation emits canned words at `tokens_per_second` (0 = as fast as possible); the sleeps pace output the way a
real engine's decode steps do.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware

from llmgw.core.clock import Clock, SystemClock
from llmgw.sim import openai_format as fmt
from llmgw.sim.behaviour import Behaviour, PrefixCache, Slots, prefill_seconds
from llmgw.sim.sleep import GARBLED, Sleeper

DEFAULT_TOKENS = 16
SIM_CONTEXT = 4096  # the context length its /v1/models says

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def make_app(
    model: str,
    *,
    tokens: int = DEFAULT_TOKENS,
    tokens_per_second: float = 0.0,
    clock: Clock | None = None,
    api_key: str = "",
    load_failure: str = "",
    behaviour: Behaviour | None = None,
) -> web.Application:
    """An aiohttp app serving `model`: /health, /metrics (the engine's own gauges, sim:requests_running,
    sim:requests_waiting, sim:kv_cache_usage_ratio), /v1/models, /v1/chat/completions, /v1/completions, /v1/embeddings.
    With `api_key`, every path answers 401 without `Authorization: Bearer <api_key>`. With `load_failure`, a model
    that failed to load behind a live HTTP server: /health 200, everything else 503 with those words. Sleep mode
    (behaviour.sleep): /sleep, /wake_up, /is_sleeping and the level-2 wake's calls as sim/sleep.py says.
    """
    if tokens < 0:
        raise ValueError(f"tokens must be >= 0, got {tokens}")
    if tokens_per_second < 0:
        raise ValueError(f"tokens_per_second must be >= 0, got {tokens_per_second}")
    handlers = _Handlers(model, tokens, tokens_per_second, clock or SystemClock(), behaviour or Behaviour())
    middlewares = [_require_key(api_key)] if api_key else []
    if load_failure:
        middlewares.append(_not_loaded(load_failure))
    if handlers.b.load_seconds > 0:
        middlewares.insert(0, _loading(handlers.clock, handlers.clock.monotonic() + handlers.b.load_seconds))
    middlewares.append(handlers.sleeper.middleware())
    app = web.Application(middlewares=middlewares)
    handlers.sleeper.add_routes(app)
    app.router.add_get("/health", handlers.health)
    app.router.add_get("/metrics", handlers.metrics)
    app.router.add_get("/v1/models", handlers.models)
    app.router.add_post("/v1/chat/completions", handlers.chat)
    app.router.add_post("/v1/completions", handlers.completions)
    app.router.add_post("/v1/embeddings", handlers.embeddings)
    return app


def _not_loaded(words: str) -> Any:
    @web.middleware
    async def mw(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path == "/health":
            return await handler(request)  # type: ignore[no-any-return]
        body = {"error": {"message": f"model failed to load: {words}", "type": "server_error", "code": 503}}
        return web.json_response(body, status=503)

    return mw


def _loading(clock: Clock, ready_at: float) -> Any:
    """Until `ready_at`, every path answers 503 as llama-server does while its model loads (health included)."""
    @web.middleware
    async def mw(request: web.Request, handler: Any) -> web.StreamResponse:
        if clock.monotonic() < ready_at:
            body = {"error": {"message": "Loading model", "type": "unavailable_error", "code": 503}}
            return web.json_response(body, status=503)
        return await handler(request)  # type: ignore[no-any-return]

    return mw


class _Handlers:
    def __init__(self, model: str, tokens: int, tokens_per_second: float, clock: Clock, b: Behaviour) -> None:
        self.model = model
        self.tokens = tokens
        self.tokens_per_second = tokens_per_second * (0.1 if b.fault == "slow" else 1.0)
        self.clock = clock
        self.b = b
        self.cache = PrefixCache(b.cache_blocks)
        self.slots = Slots(b.max_running)
        self.sleeper = Sleeper(b.sleep)
        self.requests = 0  # completions, chats and embeddings asked for, answered or not

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def metrics(self, request: web.Request) -> web.Response:
        text = (
            "# HELP sim:requests_running Completions being generated now.\n"
            "# TYPE sim:requests_running gauge\n"
            f"sim:requests_running {self.slots.running}\n"
            "# HELP sim:requests_waiting Requests queued before generation.\n"
            "# TYPE sim:requests_waiting gauge\n"
            f"sim:requests_waiting {self.slots.waiting}\n"
            "# HELP sim:requests_total Completions, chats and embeddings asked for, answered or not.\n"
            "# TYPE sim:requests_total counter\n"
            f"sim:requests_total {self.requests}\n"
        ) + self.sleeper.metrics()
        if self.b.cache_blocks:
            text += ("# HELP sim:kv_cache_usage_ratio Share of the prefix cache's blocks in use.\n"
                     "# TYPE sim:kv_cache_usage_ratio gauge\n"
                     f"sim:kv_cache_usage_ratio {self.cache.usage}\n")
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    async def _faulty(self) -> web.Response | None:
        """What a faulty engine does instead of answering: never answers (hang), or fails (error)."""
        if self.b.fault == "hang":
            await asyncio.Event().wait()  # accepted, and nothing ever comes back
        if self.b.fault == "error":
            return web.json_response(fmt.RequestError(503, "sim: planted engine error").body(), status=503)
        return None

    async def models(self, request: web.Request) -> web.Response:
        entry = {"id": self.model, "object": "model", "created": self._created(), "owned_by": "llmgw-sim",
                 "max_model_len": SIM_CONTEXT}  # as vLLM says it
        return web.json_response({"object": "list", "data": [entry]})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        failed = await self._faulty()
        if failed is not None:
            return failed
        async with self.slots:  # running from here to the last byte (or the client gone); waiting before
            return await self._chat(request)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        failed = await self._faulty()
        if failed is not None:
            return failed
        async with self.slots:
            return await self._completions(request)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await _json_body(request)
            gen = fmt.parse_chat(body, self.model, self.tokens)
        except fmt.RequestError as e:
            return _error(e)
        prefill = prefill_seconds(self.b, gen.prompt_tokens, self.cache.admit(_prompt(body)))
        id, created = f"chatcmpl-{uuid.uuid4().hex}", self._created()
        if not gen.stream:
            text = "".join([t async for t in self._generate(gen, prefill)])
            return web.json_response(fmt.chat_completion(id, created, self.model, text, gen))

        def chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
            return fmt.chat_chunk(id, created, self.model, delta, finish, gen)

        async def events() -> AsyncGenerator[dict[str, Any], None]:
            yield chunk({"role": "assistant", "content": ""}, None)
            async for token in self._generate(gen, prefill):
                yield chunk({"content": token}, None)
            yield chunk({}, gen.finish_reason)
            if gen.include_usage:
                yield fmt.usage_chunk(id, created, self.model, "chat.completion.chunk", gen)

        return await _stream(request, events())

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await _json_body(request)
            gen = fmt.parse_completion(body, self.model, self.tokens)
        except fmt.RequestError as e:
            return _error(e)
        prefill = prefill_seconds(self.b, gen.prompt_tokens, self.cache.admit(_prompt(body)))
        id, created = f"cmpl-{uuid.uuid4().hex}", self._created()
        if not gen.stream:
            text = "".join([t async for t in self._generate(gen, prefill)])
            return web.json_response(fmt.text_completion(id, created, self.model, text, gen))

        def chunk(text: str, finish: str | None) -> dict[str, Any]:
            return fmt.text_chunk(id, created, self.model, text, finish, gen)

        async def events() -> AsyncGenerator[dict[str, Any], None]:
            async for token in self._generate(gen, prefill):
                yield chunk(token, None)
            yield chunk("", gen.finish_reason)
            if gen.include_usage:
                yield fmt.usage_chunk(id, created, self.model, "text_completion", gen)

        return await _stream(request, events())

    async def embeddings(self, request: web.Request) -> web.Response:
        self.requests += 1
        try:
            return web.json_response(fmt.embeddings(await _json_body(request), self.model))
        except fmt.RequestError as e:
            return _error(e)

    async def _generate(self, gen: fmt.Generation, prefill: float = 0.0) -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        if prefill > 0:  # the prompt's uncached part, computed before the first token
            await asyncio.sleep(prefill)
        start = loop.time()
        for i, token in enumerate(fmt.canned_tokens(gen.completion_tokens)):
            if self.tokens_per_second > 0:
                # Pace against the start, not the previous token, so slow writes do not add up to drift.
                delay = start + (i + 1) / self.tokens_per_second - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
            yield ((" " if i else "") + GARBLED) if self.sleeper.garbled else token

    def _created(self) -> int:
        return int(self.clock.now())


def _prompt(body: fmt.JSON) -> str:
    """The prompt as the engine would lay it out first in its context: roles and text in order."""
    messages = body.get("messages")
    if isinstance(messages, list):
        return "".join(f"<{m.get('role')}>{m.get('content')}" for m in messages if isinstance(m, dict))
    prompt = body.get("prompt")
    return prompt if isinstance(prompt, str) else ""


async def _json_body(request: web.Request) -> fmt.JSON:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise fmt.RequestError(400, f"request body is not valid JSON: {e}") from e
    if not isinstance(body, dict):
        raise fmt.RequestError(400, "request body must be a JSON object")
    return body


def _require_key(key: str) -> Middleware:
    expected = f"Bearer {key}".encode()

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        given = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
        if not hmac.compare_digest(given, expected):
            return web.json_response(fmt.RequestError(401, "missing or wrong engine key").body(), status=401)
        return await handler(request)

    return check


def _error(e: fmt.RequestError) -> web.Response:
    return web.json_response(e.body(), status=e.status)


async def _stream(request: web.Request, events: AsyncGenerator[dict[str, Any], None]) -> web.StreamResponse:
    """Send each event as its own SSE `data:` message as soon as it exists, then `data: [DONE]`."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    try:
        async with contextlib.aclosing(events):
            async for event in events:
                await resp.write(b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
    except ConnectionError:
        pass  # the client went away; nothing left to tell it
    return resp
