"""What admitted requests are settled at, through the real router over a real control plane (LocalState, SQLite in
tmp_path, FakeClock), with a small in-process engine that answers as vLLM does."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from llmgw.config.server import RouterConfig
from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.core.limits import KeyLimits
from llmgw.router.app import Router
from tests.router.test_limits import limited

PROMPT_TOKENS = 20


def vllm_like() -> web.Application:
    """Chat: generates `max_completion_tokens or max_tokens` per choice, n choices; usage as OpenAI's.
    Responses: generates max_output_tokens; usage as the Responses API reports it (input_tokens/output_tokens)."""

    async def chat(request: web.Request) -> web.Response:
        b = await request.json()
        k = (b.get("max_completion_tokens") or b.get("max_tokens")) * b.get("n", 1)
        return web.json_response({"object": "chat.completion", "choices": [
            {"index": i, "message": {"role": "assistant", "content": "x"}, "finish_reason": "length"}
            for i in range(b.get("n", 1))],
            "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": k, "total_tokens": PROMPT_TOKENS + k}})

    async def responses(request: web.Request) -> web.Response:
        b = await request.json()
        k = b.get("max_output_tokens")
        return web.json_response({"object": "response", "status": "completed", "output": [
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "x"}]}],
            "usage": {"input_tokens": PROMPT_TOKENS, "output_tokens": k, "total_tokens": PROMPT_TOKENS + k}})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/responses", responses)
    return app


@contextlib.asynccontextmanager
async def env(tmp_path: Path, engine_up: bool = True,
              **router: Any) -> AsyncIterator[tuple[str, ControlPlane, Router]]:
    async with limited(tmp_path, FakeClock(), engine=vllm_like(), engine_up=engine_up,
                       router_cfg=RouterConfig(**router)) as lim:
        yield lim.url, lim.plane, lim.router


async def post(url: str, key: str, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as s, s.post(url + path, data=json.dumps(body),
                                                    headers={"Authorization": f"Bearer {key}"}) as r:
        return r.status, await r.json()


async def test_a_request_that_reached_no_engine_costs_nothing(tmp_path: Path) -> None:
    """The replica is in the table but nothing listens: 503 no_reachable_replica, nothing was sent. used_of()
    says such a request is settled at 0; it is settled at its whole reservation (reached=True is set before any
    attempt, and m.status stays 0 since the usage journal record is dropped)."""
    async with env(tmp_path, engine_up=False) as (url, plane, _):
        raw, rec = await plane.credentials.create_key("t", [], KeyLimits(budget=10_000, budget_period="day"))
        status, out = await post(url, raw, "/v1/chat/completions",
                                 {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1000})
        assert status == 503 and out["error"]["code"] == "no_reachable_replica"
        c = plane.limit_counters.counters[rec.id]
        assert (c.reserved, c.in_flight) == (0, 0)
        spent = plane.limit_counters.spent_in(rec.id, "total")
        assert spent == 0, f"a 503 that reached no engine was charged {spent} tokens of the budget"


async def test_responses_api_usage_is_settled(tmp_path: Path) -> None:
    """/v1/responses reports usage as input_tokens/output_tokens: the router reads only prompt_tokens /
    completion_tokens, so the request is settled at 0 and the budget never moves."""
    async with env(tmp_path) as (url, plane, _):
        raw, rec = await plane.credentials.create_key("t", [], KeyLimits(budget=3_000, budget_period="day"))
        ok = 0
        for _ in range(10):  # each really costs 20 + 1000 tokens: a 3,000-token budget allows at most 2
            status, _out = await post(url, raw, "/v1/responses",
                                      {"model": "m", "input": "hi", "max_output_tokens": 1000})
            ok += status == 200
        spent = plane.limit_counters.spent_in(rec.id, "total")
        assert ok <= 2, f"{ok} requests of 1,020 tokens admitted on a 3,000-token budget (spent: {spent})"
        assert spent == ok * (PROMPT_TOKENS + 1000), f"{ok} answers of 1,020 tokens each, the budget charged {spent}"


async def test_n_choices_cannot_overspend_a_budget(tmp_path: Path) -> None:
    """n=8 choices of max_tokens 200 cost 1,620 tokens; the reservation counts one choice: a 1,000-token budget
    admits it and ends overspent (claim: nothing admitted can cost more than it reserved)."""
    async with env(tmp_path) as (url, plane, _):
        raw, rec = await plane.credentials.create_key("t", [], KeyLimits(budget=1_000, budget_period="day"))
        status, _out = await post(url, raw, "/v1/chat/completions",
                                 {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                  "max_tokens": 200, "n": 8})
        spent = plane.limit_counters.spent_in(rec.id, "total")
        assert status == 429 or spent <= 1_000, f"budget 1000, spent {spent} (answered {status})"


GATE: dict[str, Any] = {}


def gated() -> web.Application:
    """A chat engine that answers once GATE["open"] is set; GATE["asked"] counts requests that arrived."""

    async def chat(request: web.Request) -> web.Response:
        GATE["asked"] = GATE.get("asked", 0) + 1
        await GATE["open"].wait()
        return web.json_response({"object": "chat.completion", "choices": [], "usage": {
            "prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def test_a_refused_request_does_not_end_another_requests_in_flight_count(tmp_path: Path) -> None:
    """_admit sets m.key_id before admission; proxy()'s finally calls recorder.end for it, though recorder.begin
    (in _serve) never ran for a refused request: the admitted request in flight disappears from the counts the
    control plane's status and metrics read (in flight per key and model)."""
    import asyncio

    from tests.harness import await_until

    GATE.clear()
    GATE["open"] = asyncio.Event()
    globals()["vllm_like"] = gated
    try:
        async with env(tmp_path) as (url, plane, router):
            raw, rec = await plane.credentials.create_key("t", [], KeyLimits(concurrency=1))
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
            first = asyncio.create_task(post(url, raw, "/v1/chat/completions", body))
            await await_until(lambda: asyncio.sleep(0, GATE.get("asked") == 1), 10, "the first at the engine")
            assert router.recorder.in_flight[(rec.id, "m")] == 1
            status, _ = await post(url, raw, "/v1/chat/completions", body)
            assert status == 429
            seen = router.recorder.in_flight.get((rec.id, "m"), 0)
            GATE["open"].set()
            await first
            assert seen == 1, f"one request in flight, the recorder says {seen} after a refusal"
    finally:
        globals()["vllm_like"] = _VLLM_LIKE


async def test_a_client_that_leaves_mid_request_is_settled_once(tmp_path: Path) -> None:
    """Sound: the client gives up while the engine works; the ticket is settled once, when the engine answers."""
    import asyncio

    from tests.harness import await_until

    GATE.clear()
    GATE["open"] = asyncio.Event()
    globals()["vllm_like"] = gated
    try:
        async with env(tmp_path) as (url, plane, _router):
            raw, rec = await plane.credentials.create_key("t", [], KeyLimits(concurrency=1, budget=100_000))
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
            task = asyncio.create_task(post(url, raw, "/v1/chat/completions", body))
            await await_until(lambda: asyncio.sleep(0, GATE.get("asked") == 1), 10, "the request at the engine")
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            c = plane.limit_counters.counters[rec.id]
            assert c.in_flight == 1  # the engine is still working for it (handlers are not cancelled)
            GATE["open"].set()
            await await_until(lambda: asyncio.sleep(0, c.in_flight == 0), 10, "the ticket settled")
            assert c.reserved == 0 and plane.limit_counters.spent_in(rec.id, "total") == 7
            assert not plane.limit_counters.tickets
    finally:
        globals()["vllm_like"] = _VLLM_LIKE


_VLLM_LIKE = vllm_like


async def test_an_engine_timeout_after_the_request_was_sent_is_not_free(tmp_path: Path) -> None:
    """The engine had the request and worked on it (a long generation); the router gives up at first_byte_timeout:
    504, recorded with (0, 0) seen. used_of() settles a reached request at the engine's report unless its status is
    0 or 499, so this one is settled at 0: the whole reservation is given back though the engine may have
    generated up to max_tokens (the same for a stream broken mid-way: settled at the events seen, no prompt)."""
    import asyncio


    GATE.clear()
    GATE["open"] = asyncio.Event()
    globals()["vllm_like"] = gated
    try:
        async with env(tmp_path, first_byte_timeout=0.5) as (url, plane, _):
            raw, rec = await plane.credentials.create_key("t", [], KeyLimits(budget=100_000))
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 50_000}
            status, _out = await post(url, raw, "/v1/chat/completions", body)
            GATE["open"].set()
            c = plane.limit_counters.counters[rec.id]
            assert status == 504 and GATE["asked"] == 1 and c.in_flight == 0
            spent = plane.limit_counters.spent_in(rec.id, "total")
            assert spent > 0, f"the engine had it for {0.5}s of generation; the budget was charged {spent}"
    finally:
        globals()["vllm_like"] = _VLLM_LIKE


def streamer() -> web.Application:
    """A streaming chat engine reading stream_options as vLLM does (pydantic, lax: "false" is False): a prompt of
    5,000 tokens, one token per event, and the usage chunk only when include_usage is true."""
    from pydantic import BaseModel

    class StreamOptions(BaseModel):
        include_usage: bool | None = True

    async def chat(request: web.Request) -> web.StreamResponse:
        b = await request.json()
        opts = StreamOptions.model_validate(b.get("stream_options") or {"include_usage": False})
        k = b.get("max_completion_tokens") or b.get("max_tokens")
        sr = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await sr.prepare(request)
        for _ in range(k):
            await sr.write(b'data: {"object":"chat.completion.chunk",'
                           b'"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n')
        if opts.include_usage:
            await sr.write(b'data: {"object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":5000,'
                           b'"completion_tokens":%d,"total_tokens":%d}}\n\n' % (k, 5000 + k))
        await sr.write(b"data: [DONE]\n\n")
        await sr.write_eof()
        return sr

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def test_a_stream_cannot_hide_its_usage_from_the_router(tmp_path: Path) -> None:
    """app._serve asks the engine for usage unless the client's include_usage is truthy *in Python*: "false" is
    truthy for the router, False for the engine, so no usage chunk comes and the request is settled at the events
    seen: its prompt is free. The prompt is long enough for the engine's 5,000 to be within what it could cost (the
    router bills no more than that)."""
    globals()["vllm_like"] = streamer
    try:
        async with env(tmp_path) as (url, plane, _):
            raw, rec = await plane.credentials.create_key("t", [], KeyLimits(budget=1_000_000))
            for opts in ({"include_usage": True}, {"include_usage": "false"}):
                before = plane.limit_counters.spent_in(rec.id, "total")
                async with aiohttp.ClientSession() as s, s.post(url + "/v1/chat/completions", headers={
                        "Authorization": f"Bearer {raw}"}, json={"model": "m", "stream": True, "max_tokens": 3,
                        "stream_options": opts, "messages": [{"role": "user", "content": "hi " * 2000}]}) as r:
                    assert r.status == 200
                    await r.read()
                charged = plane.limit_counters.spent_in(rec.id, "total") - before
                assert charged == 5003, f"stream_options {opts}: charged {charged} of 5,003 tokens"
    finally:
        globals()["vllm_like"] = _VLLM_LIKE
