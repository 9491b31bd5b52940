"""What a request can be made to cost through the real router over a real control plane: the length fields an
engine reads beyond OpenAI's (a real llama-server's own, on every path), a stream that runs past its reservation,
and an engine that reports more than could have been generated."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import httpx2 as httpx
import pytest
from aiohttp import web

from llmgw.core.clock import FakeClock
from llmgw.core.limits import KeyLimits
from tests.harness import await_until
from tests.router.engines import Engine
from tests.router.test_limits import Limited, limited

N = 300  # what each request asks llama-server for in its own fields: far more than max_tokens says
WORDS = "Count from one to one thousand in words, one number per line, and never stop."
# per path, a request bounding itself to one token in OpenAI's field and to N in the field llama-server prefers
LLAMA_FIELDS = {
    "/v1/chat/completions": {"messages": [{"role": "user", "content": WORDS}], "max_tokens": 1, "n_predict": N},
    "/v1/completions": {"prompt": WORDS, "max_tokens": 1, "max_completion_tokens": N},
    "/v1/responses": {"input": WORDS, "max_output_tokens": 1, "n_predict": N},
    "/v1/messages": {"messages": [{"role": "user", "content": WORDS}], "max_tokens": 1, "n_predict": N},
}


async def spent(env: Limited) -> int:
    """Every token the store recorded, once every request ended and its usage was flushed."""
    await await_until(lambda: asyncio.sleep(0, not env.router.usage_journal.inflight), 60, "every request finished")
    assert await env.router.usage_journal.flush()
    return sum(r.prompt_tokens + r.completion_tokens for r in env.store.usage_recent(0.0))


@pytest.mark.parametrize("path", list(LLAMA_FIELDS))
async def test_llama_servers_own_length_fields_cannot_overspend_a_budget(tmp_path: Path, llama: Engine,
                                                                         path: str) -> None:
    """A budget that fits one request of N tokens, three sent at once: each reserves N (all its fields are told N),
    so one is admitted and the budget holds. Before: each reserved one token, all three were admitted and
    llama-server generated N for each."""
    budget = N + 400
    async with limited(tmp_path, FakeClock(), engine_url=llama.url) as env:
        key = await env.key(KeyLimits(budget=budget, budget_period="day"))
        body = {"model": "m", "ignore_eos": True, "temperature": 0, **LLAMA_FIELDS[path]}
        async with httpx.AsyncClient(timeout=300) as h:
            answers = await asyncio.gather(*(h.post(env.url + path, json=body, headers={
                "Authorization": f"Bearer {key}"}) for _ in range(3)))
        statuses = sorted(a.status_code for a in answers)
        assert statuses[0] == 200, [a.text[:300] for a in answers]
        assert await spent(env) <= budget, statuses
        assert statuses == [200, 429, 429], [a.text[:300] for a in answers]


def flood(events: int = 2000, usage: tuple[int, int] | None = None) -> web.Application:
    """An engine that ignores the bound it is told: a stream of `events` tokens; a whole answer reporting `usage`."""

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body.get("stream"):
            p, c = usage or (1, events)
            return web.json_response({"id": "x", "object": "chat.completion", "model": "m", "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "w"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}})
        sr = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await sr.prepare(request)
        for _ in range(events):
            chunk = {"id": "x", "object": "chat.completion.chunk", "model": "m",
                     "choices": [{"index": 0, "delta": {"content": "w "}, "finish_reason": None}]}
            await sr.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await sr.write(b"data: [DONE]\n\n")
        return sr

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def test_a_stream_past_its_reservation_is_cut_and_costs_no_more(tmp_path: Path) -> None:
    async with limited(tmp_path, FakeClock(), engine=flood()) as env:
        key = await env.key(KeyLimits(budget=100_000, budget_period="day"))
        body = {"model": "m", "stream": True, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
        async with httpx.AsyncClient(timeout=60) as h:
            r = await h.post(env.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"})
        tokens = r.text.count('"content": "w "')
        assert "reservation_exceeded" in r.text and "[DONE]" not in r.text
        used = await spent(env)
        assert 5 <= tokens <= used < 200, (tokens, used)  # a body of ~100 bytes and 5 tokens
        assert env.plane.limit_counters.spent_in(next(iter(env.plane.limit_counters.counters)), "day") == used
        assert env.router.recorder.snapshot().models["m"].overruns == 1


async def test_an_engine_reporting_more_than_could_be_generated_is_billed_what_it_reserved(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    async with limited(tmp_path, FakeClock(), engine=flood(usage=(2**31, 2**31))) as env:
        key = await env.key(KeyLimits(budget=100_000, budget_period="day"))
        body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
        async with httpx.AsyncClient(timeout=60) as h:
            r = await h.post(env.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 200
        used = await spent(env)
        assert 5 < used < 200, used
        assert env.plane.limit_counters.spent_in(next(iter(env.plane.limit_counters.counters)), "day") == used
        assert env.router.recorder.snapshot().models["m"].overruns == 1
        assert "recorded at its reservation" in caplog.text


async def test_an_engine_reporting_more_than_any_count_is_bounded_for_a_key_without_limits(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A key without limits reserves nothing, and its request was recorded at whatever the engine said, each count
    held to 2^31 alone: 2^31 + 2^31 was recorded as 4,294,967,296 tokens. Both together are held to 2^31."""
    caplog.set_level(logging.WARNING)
    async with limited(tmp_path, FakeClock(), engine=flood(usage=(2**31, 2**31))) as env:
        key = await env.key(KeyLimits())
        body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
        async with httpx.AsyncClient(timeout=60) as h:
            r = await h.post(env.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 200
        assert await spent(env) == 2**31
        assert env.router.recorder.snapshot().models["m"].overruns == 1
        assert "its key has no limits" in caplog.text
