"""A non-streamed request whose client gives up is given up at the engine too: the router watches the client while
it waits for the whole answer, and closes its connection to the engine once the client has gone, which is how an
engine hears that nobody waits (llama-server's newer releases stop generating then; the agent's gate passes the
close on within half a second). Before, the router held the engine's connection until the whole answer came: a
client that timed out after 1 s left llama-server generating all 1,500 tokens of it (the next request on that
one-slot replica took 55 s through llmgw against 1 s direct), recorded as its tenant's. The real router over a
real control plane; the engine a stand-in that generates slowly and notes when its connection closes."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx2 as httpx
import pytest
from aiohttp import web

from llmgw.core.clock import FakeClock
from llmgw.core.limits import KeyLimits
from tests.harness import await_until
from tests.router.test_limits import limited

CHAT = {"model": "m", "max_tokens": 1500, "messages": [{"role": "user", "content": "Count to a thousand."}]}
HEARD_S = 3.0  # the router looks for its client every 0.25 s


class SlowEngine:
    """Answers after 30 s of "generating", unless its connection closes first (then notes when)."""

    def __init__(self) -> None:
        self.closed_at: float | None = None
        self.answered = 0

    async def chat(self, request: web.Request) -> web.Response:
        await request.read()
        for _ in range(300):
            await asyncio.sleep(0.1)
            if request.transport is None or request.transport.is_closing():
                self.closed_at = time.monotonic()
                return web.Response(status=499)
        self.answered += 1
        return web.json_response({"id": "x", "object": "chat.completion", "model": "m", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "one"}, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 1500, "total_tokens": 1509}})

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        return app


async def test_a_client_that_gives_up_is_given_up_at_the_engine(tmp_path: Path) -> None:
    engine = SlowEngine()
    async with limited(tmp_path, FakeClock(), engine=engine.app()) as env:
        key = await env.key(KeyLimits(budget=100_000, budget_period="day"))
        with pytest.raises(httpx.TimeoutException):
            async with httpx.AsyncClient(timeout=1.0) as impatient:
                await impatient.post(env.url + "/v1/chat/completions", json=CHAT,
                                     headers={"Authorization": f"Bearer {key}"})
        left = time.monotonic()
        await await_until(lambda: asyncio.sleep(0, engine.closed_at is not None), HEARD_S,
                          "the engine's connection closed for the client that left")
        assert engine.closed_at is not None and engine.answered == 0
        await await_until(lambda: asyncio.sleep(0, not env.router.usage_journal.inflight), 30, "the request ended")
        assert await env.router.usage_journal.flush()
        (row,) = env.store.usage_recent(0.0)
        # recorded at what it reserved (its bytes and max_tokens), as its limits settle it: not the 1,509 the engine
        # would have said, and not 0, which would let a client pass its day's token budget by leaving in time
        assert row.requests == 1 and 1500 < row.prompt_tokens + row.completion_tokens < 1700, row
        print(f"\nthe engine's connection closed {engine.closed_at - left:.2f}s after the client left")
