"""What the router measures per model: requests by the status they are recorded with, tokens, and time to first
token, time per output token, queue wait and end to end, on the injected clock. A client naming models that do not
exist cannot grow the metrics."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from llmgw.config.server import RouterConfig
from llmgw.router.stats import OTHER, Measure, Recorder
from llmgw.router.usage import StreamUsage
from tests.router.conftest import RouterUnderTest, router_over, settle


def sse(event: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(event).encode() + b"\n\n"


async def post(url: str, key: str, body: dict[str, Any]) -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as s, s.post(
        url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
    ) as r:
        return r.status, await r.read()


def test_timings_come_from_the_clock_given() -> None:
    now = [100.0]
    w = StreamUsage(strip=False, now=lambda: now[0])
    now[0] = 100.5
    w.feed(sse({"choices": [{"delta": {"content": "a"}}]}))
    now[0] = 101.5
    w.feed(sse({"choices": [{"delta": {"content": "b"}}]}) + b"data: [DONE]\n\n")
    assert (w.first_at, w.last_at) == (100.5, 101.5)
    rec = Recorder()
    m = Measure(start=100.0, model="m", key_id="k", completion_tokens=3, first_at=w.first_at, last_at=w.last_at)
    rec.finish(m, 200, 102.0)
    s = rec.snapshot().models["m"]
    assert s.ttft.sum == 0.5 and s.ttft.count == 1
    assert s.tbt.sum == 0.5  # (101.5 - 100.5) / (3 - 1): per output token after the first
    assert s.e2e.sum == 2.0 and s.queue.count == 1
    assert s.requests == {"200": 1}


async def test_requests_are_counted_by_model_and_status(rut: RouterUnderTest) -> None:
    stream = {"model": "sim-a", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    for _ in range(2):
        status, body = await post(rut.url, rut.key, stream)
        assert status == 200 and b"[DONE]" in body
    assert (await post(rut.url, rut.key, {"model": "sim-b", "messages": [{"role": "user", "content": "hi"}]}))[0] == 200
    assert (await post(rut.url, rut.key, {"model": "no-such-1", "messages": []}))[0] == 404
    assert (await post(rut.url, rut.key, {"model": "no-such-2", "messages": []}))[0] == 404
    assert (await post(rut.url, "wrong", stream))[0] == 401
    await settle(rut)
    models = rut.router.recorder.snapshot().models
    assert set(models) == {"sim-a", "sim-b", OTHER, ""}  # unknown names share one label; no key, no model
    a = models["sim-a"]
    assert a.requests == {"200": 2} and a.ttft.count == 2 and a.e2e.count == 2 and a.queue.count == 2
    assert a.completion_tokens > 0 and a.tbt.count == 2
    assert models["sim-b"].ttft.count == 0  # not a stream: no first token seen
    assert models[OTHER].requests == {"404": 2}
    assert models[""].requests == {"401": 1}
    assert rut.router.recorder.snapshot().in_flight == []


def held_engine(release: asyncio.Event, started: asyncio.Event) -> web.Application:
    async def chat(request: web.Request) -> web.StreamResponse:
        started.set()
        await release.wait()
        return web.json_response({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def test_requests_in_flight_are_counted_per_key_and_model(tmp_path: Path) -> None:
    release, started = asyncio.Event(), asyncio.Event()
    async with router_over(tmp_path, held_engine(release, started), RouterConfig()) as b:
        task = asyncio.create_task(post(b.url, b.key, {"model": "sim-a", "messages": []}))
        await asyncio.wait_for(started.wait(), 10)
        flying = b.router.recorder.snapshot().in_flight
        assert [(f.model, f.n) for f in flying] == [("sim-a", 1)]
        release.set()
        assert (await task)[0] == 200
        assert b.router.recorder.snapshot().in_flight == []
