"""The sim engine models what routing acts on: a prefix cache that makes time to first token proportional to the
uncached prompt, a concurrency limit with a queue its gauges report, and planted faults."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from llmgw.core.clock import FakeClock
from llmgw.sim.behaviour import BLOCK_CHARS, Behaviour, PrefixCache
from llmgw.sim.server import make_app
from tests.harness import await_until, free_port

SYSTEM = "word " * 400  # 2,000 characters, 400 "tokens"


def test_the_prefix_cache_counts_leading_blocks_and_forgets_the_oldest() -> None:
    c = PrefixCache(blocks=40)
    assert c.admit(SYSTEM) == 0.0
    share = c.admit(SYSTEM + "different ending " * 10)
    assert share == pytest.approx((len(SYSTEM) // BLOCK_CHARS) * BLOCK_CHARS / (len(SYSTEM) + 170))
    assert c.usage == 33 / 40  # 31 blocks, and 2 more of the new ending
    c.admit("z" * BLOCK_CHARS * 40)  # forty new blocks push every old one out
    assert c.admit(SYSTEM) == 0.0


@contextlib.asynccontextmanager
async def serve(b: Behaviour) -> AsyncIterator[str]:
    # a hung handler is given half a second at the end, not aiohttp's default minute
    runner = web.AppRunner(make_app("m", tokens=4, behaviour=b), shutdown_timeout=0.5)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def chat(url: str, system: str, timeout: float = 30) -> tuple[int, float]:
    body = {"model": "m", "messages": [{"role": "system", "content": system}, {"role": "user", "content": "hi"}]}
    t0 = time.perf_counter()
    async with aiohttp.ClientSession() as s, s.post(url + "/v1/chat/completions", json=body,
                                                    timeout=aiohttp.ClientTimeout(total=timeout)) as r:
        await r.read()
        return r.status, time.perf_counter() - t0


async def test_a_cached_prefix_is_answered_faster_than_a_new_one() -> None:
    async with serve(Behaviour(prefill_tokens_per_second=2000, cache_blocks=1000)) as url:
        status, cold = await chat(url, SYSTEM)  # 401 tokens at 2,000/s: about 0.2 s
        assert status == 200 and cold >= 0.19
        status, warm = await chat(url, SYSTEM)  # 31 of 32 blocks cached: the rest in about 0.01 s
        assert status == 200 and warm < cold / 3, (cold, warm)


async def metrics(url: str) -> str:
    async with aiohttp.ClientSession() as s, s.get(url + "/metrics") as r:
        return await r.text()


async def test_requests_beyond_the_limit_wait_and_the_gauges_say_so() -> None:
    async with serve(Behaviour(prefill_tokens_per_second=500, max_running=1, cache_blocks=100)) as url:
        tasks = [asyncio.create_task(chat(url, f"{i} " + SYSTEM)) for i in range(3)]

        async def queued() -> bool:
            text = await metrics(url)
            return "sim:requests_running 1\n" in text and "sim:requests_waiting 2\n" in text

        await await_until(queued, 10, "one running, two waiting")
        assert all(status == 200 for status, _ in await asyncio.gather(*tasks))
        text = await metrics(url)
        assert "sim:requests_running 0\n" in text and "sim:requests_waiting 0\n" in text
        assert "sim:kv_cache_usage_ratio" in text


async def test_planted_faults() -> None:
    async with serve(Behaviour(fault="error")) as url:
        assert (await chat(url, "x"))[0] == 503
    async with serve(Behaviour(fault="hang")) as url:
        with pytest.raises(TimeoutError):
            await chat(url, "x", timeout=0.5)
        async with aiohttp.ClientSession() as s, s.get(url + "/health") as r:
            assert r.status == 200  # healthy to a probe that only asks /health: the wedged engine case


async def test_a_model_still_loading_answers_503_on_every_path_until_it_has_loaded() -> None:
    clock = FakeClock()
    runner = web.AppRunner(make_app("m", tokens=2, clock=clock, behaviour=Behaviour(load_seconds=5)))
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with aiohttp.ClientSession() as s:
            for path in ("/health", "/v1/models"):
                async with s.get(f"http://127.0.0.1:{port}{path}") as r:
                    assert r.status == 503 and "Loading model" in await r.text()
            clock.advance(5)
            for path in ("/health", "/v1/models"):
                async with s.get(f"http://127.0.0.1:{port}{path}") as r:
                    assert r.status == 200
    finally:
        await runner.cleanup()
