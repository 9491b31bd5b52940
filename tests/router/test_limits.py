"""Tenant limits through the real router over a real control plane, seen by the official openai client: 429s with
OpenAI's codes and headers, the client's own retry after Retry-After, a budget that concurrent requests cannot
overspend, and refused requests that reach no engine (the sim engine counts what it is asked)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx2 as httpx
import openai
import pytest
from aiohttp import web

from llmgw.config.server import ModelSpec, RouterConfig, ServerConfig, TLSFiles
from llmgw.control.plane import ControlPlane
from llmgw.core.clock import Clock, FakeClock, SystemClock
from llmgw.core.conditions import ConditionType, Status, set_condition
from llmgw.core.limits import KeyLimits
from llmgw.core.reasons import Reason
from llmgw.records.state import ReplicaRecord
from llmgw.router.app import Router
from llmgw.router.keys import KeyRing
from llmgw.sim.behaviour import Behaviour
from llmgw.sim.server import make_app
from llmgw.store.sqlite import SqliteStore
from tests.harness import await_until, free_port, local_state


@dataclass
class Limited:
    url: str
    plane: ControlPlane
    router: Router
    store: SqliteStore
    statuses: list[int] = field(default_factory=list)  # every HTTP answer the clients saw, retries included

    async def key(self, limits: KeyLimits) -> str:
        raw, _ = await self.plane.credentials.create_key("tenant", [], limits)
        return raw

    def client(self, key: str, retries: int = 0) -> openai.AsyncOpenAI:
        async def seen(r: httpx.Response) -> None:
            self.statuses.append(r.status_code)

        http = openai.DefaultAsyncHttpxClient(event_hooks={"response": [seen]})
        return openai.AsyncOpenAI(base_url=self.url + "/v1", api_key=key, max_retries=retries, http_client=http)

    engine_url: str = ""

    async def engine_requests(self) -> int:
        """What the engine says it was asked (its own counter, on its metrics page)."""
        async with httpx.AsyncClient() as h:
            text = (await h.get(self.engine_url + "/metrics")).text
        return int(next(ln.split()[1] for ln in text.splitlines() if ln.startswith("sim:requests_total ")))


@contextlib.asynccontextmanager
async def limited(tmp_path: Path, clock: Clock, tokens_per_second: float = 0.0, engine: web.Application | None = None,
                  engine_up: bool = True, router_cfg: RouterConfig | None = None, engine_url: str = ""
                  ) -> AsyncIterator[Limited]:
    """The real router over a real control plane (SQLite in tmp_path) with one ready replica of model "m": a sim
    engine by default, or `engine` (not listening at all unless `engine_up`), or the engine already listening at
    `engine_url`."""
    erun = web.AppRunner(engine or make_app("m", tokens=4, tokens_per_second=tokens_per_second, behaviour=Behaviour()))
    await erun.setup()
    eport = free_port()
    if engine_up and not engine_url:
        await web.TCPSite(erun, "127.0.0.1", eport).start()
    engine_url = engine_url or f"http://127.0.0.1:{eport}"
    spec = ModelSpec.model_validate({"name": "m", "source": "org/m", "engine": "sim", "scaling": {"min": 1, "max": 1}})
    cfg = ServerConfig(tls=TLSFiles(ca="x", cert="x", key="x"), models=[spec], router=router_cfg or RouterConfig())
    store = SqliteStore(tmp_path / "llmgw.db").open()
    now = clock.now()
    ready = set_condition([], ConditionType.Ready, Status.TRUE, Reason.AllShardsReady, "", now)
    store.put_replica(ReplicaRecord(id="m-1", model="m", created_at=now, shards_expected=1, conditions=ready,
                                    endpoint=engine_url))
    plane = ControlPlane(cfg, store, clock)
    plane.load()
    router = Router(local_state(plane), KeyRing(store), cfg.router, cfg.load_wait, cfg.max_body)
    runner = web.AppRunner(router.app())
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield Limited(f"http://127.0.0.1:{port}", plane, router, store, engine_url=engine_url)
    finally:
        await runner.cleanup()
        await router.close()
        await erun.cleanup()
        store.close()


async def ask(c: openai.AsyncOpenAI, max_tokens: int = 4) -> openai.types.chat.ChatCompletion:
    return await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                           max_tokens=max_tokens)


async def test_requests_per_minute_answer_429_with_openais_code_and_headers(tmp_path: Path) -> None:
    async with limited(tmp_path, FakeClock()) as env:
        c = env.client(await env.key(KeyLimits(rpm=2)))
        first = await c.chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
        assert first.headers["x-ratelimit-limit-requests"] == "2"
        assert first.headers["x-ratelimit-remaining-requests"] == "1"
        await ask(c)
        with pytest.raises(openai.RateLimitError) as e:
            await ask(c)
        r = e.value.response
        assert e.value.code == "rate_limit_exceeded" and r.status_code == 429
        assert r.headers["Retry-After"] == "30" and r.headers["x-ratelimit-remaining-requests"] == "0"
        assert r.headers["x-ratelimit-reset-requests"] == "1m0s"
        assert await env.engine_requests() == 2  # the refused one reached no engine


async def test_the_official_client_retries_after_retry_after_and_gets_through(tmp_path: Path) -> None:
    """One request at a time: a second, sent while a slow first streams, is told to retry in a second; the client
    waits that out on its own and is answered."""
    async with limited(tmp_path, SystemClock(), tokens_per_second=8) as env:  # 4 tokens: half a second
        key = await env.key(KeyLimits(concurrency=1))
        slow = asyncio.create_task(ask(env.client(key)))
        await await_until(lambda: asyncio.sleep(0, env.router.usage_journal.inflight), 10,
                          "the first request in flight")
        t0 = time.monotonic()
        second = await ask(env.client(key, retries=2))
        assert second.choices[0].message.content
        assert (await slow).choices[0].message.content
        assert env.statuses.count(429) == 1 and env.statuses.count(200) == 2, env.statuses
        assert time.monotonic() - t0 >= 1.0  # it waited as told (Retry-After: 1)
        assert await env.engine_requests() == 2


async def test_concurrency_and_tokens_per_minute_answer_429_with_retry_after(tmp_path: Path) -> None:
    async with limited(tmp_path, FakeClock(), tokens_per_second=8) as env:  # each answer takes half a second
        one_at_a_time = env.client(await env.key(KeyLimits(concurrency=1)))
        slow = asyncio.create_task(ask(one_at_a_time))
        await await_until(lambda: asyncio.sleep(0, env.router.usage_journal.inflight), 10,
                          "the first request in flight")
        with pytest.raises(openai.RateLimitError) as e:
            await ask(one_at_a_time)
        assert e.value.code == "rate_limit_exceeded" and e.value.response.headers["Retry-After"] == "1"
        assert "1 requests in flight, the limit is 1" in e.value.message
        await slow

        few_tokens = env.client(await env.key(KeyLimits(tpm=300)))
        slow = asyncio.create_task(ask(few_tokens, max_tokens=100))  # reserves about 180 of the minute's 300
        await await_until(lambda: asyncio.sleep(0, env.router.usage_journal.inflight), 10,
                          "the first request in flight")
        with pytest.raises(openai.RateLimitError) as e:
            await ask(few_tokens, max_tokens=100)
        r = e.value.response
        assert e.value.code == "rate_limit_exceeded" and "tokens per minute" in e.value.message
        assert r.headers["x-ratelimit-limit-tokens"] == "300" and int(r.headers["x-ratelimit-remaining-tokens"]) < 180
        assert int(r.headers["Retry-After"]) >= 1 and r.headers["x-ratelimit-reset-tokens"].endswith("s")
        await slow
        assert await env.engine_requests() == 2


async def test_tokens_per_minute_and_a_request_larger_than_a_minutes_tokens(tmp_path: Path) -> None:
    async with limited(tmp_path, FakeClock()) as env:
        c = env.client(await env.key(KeyLimits(tpm=300)), retries=2)
        with pytest.raises(openai.RateLimitError) as e:
            await ask(c, max_tokens=400)  # may cost more than 300 tokens: never admissible
        assert e.value.code == "request_too_large"
        assert e.value.response.headers["x-should-retry"] == "false" and "Retry-After" not in e.value.response.headers
        assert env.statuses == [429], "told not to retry, the client did not"
        await ask(c, max_tokens=100)  # reserves ~180; uses a few: the rest comes back
        await ask(c, max_tokens=100)
        assert await env.engine_requests() == 2


async def test_a_spent_budget_is_insufficient_quota_and_the_client_does_not_retry(tmp_path: Path) -> None:
    async with limited(tmp_path, FakeClock()) as env:
        c = env.client(await env.key(KeyLimits(budget=150, budget_period="day")), retries=2)
        await ask(c)  # reserves ~90 tokens, spends ~10
        with pytest.raises(openai.RateLimitError) as e:
            await ask(c, max_tokens=100)
        assert e.value.code == "insufficient_quota" and e.value.type == "insufficient_quota"
        assert "Retry-After" not in e.value.response.headers
        assert "tokens this day" in e.value.message
        assert env.statuses == [200, 429]
        assert await env.engine_requests() == 1


def spends_what_it_may(asked: list[int]) -> web.Application:
    """An engine that uses all a request could cost: a prompt token per byte of the body it is sent and every token
    its max_tokens allows, each answer taking 0.2 s (so the requests overlap). `asked` gets each request's cost."""

    async def chat(request: web.Request) -> web.Response:
        body = await request.read()
        prompt, completion = len(body), json.loads(body)["max_tokens"]
        asked.append(prompt + completion)
        await asyncio.sleep(0.2)
        return web.json_response({"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "w"}, "finish_reason": "length"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def test_a_budget_hammered_by_64_concurrent_requests_is_not_overspent(tmp_path: Path) -> None:
    """Each request spends its whole reservation: as many are admitted as the budget holds reservations, no more
    (with reservations too small, more get through and overspend) and no fewer."""
    asked: list[int] = []
    async with limited(tmp_path, FakeClock(), engine=spends_what_it_may(asked)) as env:
        budget = 2000
        c = env.client(await env.key(KeyLimits(budget=budget)))

        async def one() -> bool:
            try:
                await ask(c)
                return True
            except openai.RateLimitError as e:
                assert e.code == "insufficient_quota"
                return False

        results = await asyncio.gather(*(one() for _ in range(64)))
        admitted = sum(results)
        await await_until(lambda: asyncio.sleep(0, not env.router.usage_journal.inflight), 10, "every request finished")
        assert await env.router.usage_journal.flush()
        rows = env.store.usage_recent(0.0)
        spent = sum(r.prompt_tokens + r.completion_tokens for r in rows)
        requests = sum(r.requests for r in rows)
        assert requests == admitted == len(asked)  # the refused reached no engine and cost nothing
        (reservation,) = set(asked)  # every request alike: what the engine was allowed, it used
        assert admitted == budget // reservation, (admitted, reservation)
        assert budget - reservation < spent <= budget
        counters = env.plane.limit_counters.counters
        (key_counters,) = counters.values()
        assert env.plane.limit_counters.spent_in(next(iter(counters)), "total") == spent
        assert key_counters.reserved == 0 and key_counters.in_flight == 0


async def test_an_image_reserves_what_it_may_cost_against_the_budget(tmp_path: Path) -> None:
    """An image part costs its model thousands of prompt tokens for a few bytes of URL: the reservation counts
    router.reserve_media_tokens for it, so a budget that cannot pay for it refuses it before any engine sees it."""
    async with limited(tmp_path, FakeClock()) as env:
        c = env.client(await env.key(KeyLimits(budget=10_000, budget_period="day")))
        with pytest.raises(openai.RateLimitError) as e:
            await c.chat.completions.create(model="m", max_tokens=4, messages=[{"role": "user", "content": [
                {"type": "text", "text": "what is this"},
                {"type": "image_url", "image_url": {"url": "https://example.invalid/a.png"}}]}])
        assert e.value.code == "insufficient_quota" and "may cost up to" in str(e.value)
        assert await env.engine_requests() == 0
