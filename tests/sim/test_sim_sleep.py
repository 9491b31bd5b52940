"""The sim engine sleeps like vLLM: /sleep?level=N frees its (pretend) GPU memory and refuses what needs the
weights, /wake_up takes the configured time, /is_sleeping says so with the memory held, and a planted leak keeps
memory held after a level-1 sleep until a level-2 one. A level-2 sleep discards the weights, as vLLM's does: a bare
/wake_up says awake and answers garbage; vLLM's documented level-2 wake brings the right answers back."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from llmgw.sim.behaviour import Behaviour
from llmgw.sim.engine import parse_args
from llmgw.sim.server import make_app
from llmgw.sim.sleep import GARBLED, SleepMode
from tests.harness import free_port

MB = 1 << 20


@contextlib.asynccontextmanager
async def serve(mode: SleepMode, key: str = "") -> AsyncIterator[str]:
    runner = web.AppRunner(make_app("m", tokens=2, api_key=key, behaviour=Behaviour(sleep=mode)))
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def call(method: str, url: str, key: str = "", body: Any = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {"model": "m", "prompt": "hi"} if url.endswith("/completions") else body
    async with aiohttp.ClientSession() as s, s.request(method, url, json=body, headers=headers) as r:
        data = await r.json() if r.content_type == "application/json" else None
        return r.status, data


async def test_sleep_frees_memory_refuses_completions_and_wake_takes_its_time() -> None:
    async with serve(SleepMode(enabled=True, wake_seconds=0.3, memory_bytes=800 * MB)) as url:
        assert await call("GET", url + "/is_sleeping") == (
            200, {"is_sleeping": False, "level": 0, "gpu_memory_used_bytes": 800 * MB})
        assert (await call("POST", url + "/sleep?level=1"))[0] == 200
        status, answer = await call("GET", url + "/is_sleeping")
        assert answer == {"is_sleeping": True, "level": 1, "gpu_memory_used_bytes": 0}
        status, answer = await call("POST", url + "/v1/completions")
        assert status == 503 and "sleeping" in answer["error"]["message"]
        assert (await call("GET", url + "/v1/models"))[0] == 200  # what needs no weights still answers
        assert (await call("GET", url + "/health"))[0] == 200
        t0 = time.perf_counter()
        assert (await call("POST", url + "/wake_up"))[0] == 200
        assert time.perf_counter() - t0 >= 0.29
        assert (await call("POST", url + "/v1/completions"))[0] == 200
        async with aiohttp.ClientSession() as s, s.get(url + "/metrics") as r:
            assert f"sim:gpu_memory_used_bytes {800 * MB}" in await r.text()


async def test_a_leak_holds_memory_after_level_one_and_level_two_frees_it() -> None:
    async with serve(SleepMode(enabled=True, memory_bytes=800 * MB, leak_bytes=600 * MB)) as url:
        await call("POST", url + "/sleep?level=1")
        assert (await call("GET", url + "/is_sleeping"))[1]["gpu_memory_used_bytes"] == 600 * MB
        await call("POST", url + "/sleep?level=2")
        assert (await call("GET", url + "/is_sleeping"))[1] == {"is_sleeping": True, "level": 2,
                                                                "gpu_memory_used_bytes": 0}


async def text(url: str) -> str:
    status, answer = await call("POST", url + "/v1/completions")
    assert status == 200, answer
    return str(answer["choices"][0]["text"])


async def test_a_bare_wake_from_level_two_answers_garbage_and_the_full_wake_restores_the_weights() -> None:
    async with serve(SleepMode(enabled=True, reload_seconds=0.3)) as url:
        right = await text(url)
        assert GARBLED not in right
        await call("POST", url + "/sleep?level=2")
        assert await call("POST", url + "/wake_up") == (200, {"status": "awake", "tags": ["weights", "kv_cache"]})
        assert (await call("GET", url + "/is_sleeping"))[1]["is_sleeping"] is False
        assert await text(url) == " ".join(GARBLED * len(right.split()))  # 200, and wrong
        await call("POST", url + "/sleep?level=2")
        assert await call("POST", url + "/wake_up?tags=weights") == (200, {"status": "sleeping", "tags": ["weights"]})
        assert (await call("POST", url + "/v1/completions"))[0] == 503  # the KV cache still sleeps
        t0 = time.perf_counter()
        assert await call("POST", url + "/collective_rpc", body={"method": "reload_weights"}) == (
            200, {"results": [None]})
        assert time.perf_counter() - t0 >= 0.29  # read again: the load time
        assert await call("POST", url + "/wake_up?tags=kv_cache") == (200, {"status": "awake", "tags": ["kv_cache"]})
        assert await call("POST", url + "/reset_prefix_cache") == (200, {"success": True})
        assert await text(url) == right


async def test_a_level_one_sleeper_keeps_its_weights_through_a_bare_wake() -> None:
    async with serve(SleepMode(enabled=True)) as url:
        right = await text(url)
        await call("POST", url + "/sleep?level=1")
        await call("POST", url + "/wake_up")
        assert await text(url) == right


async def test_weights_cannot_be_reloaded_while_they_sleep_nor_an_unknown_method_or_tag_run() -> None:
    async with serve(SleepMode(enabled=True)) as url:
        await call("POST", url + "/sleep?level=2")
        status, answer = await call("POST", url + "/collective_rpc", body={"method": "reload_weights"})
        assert status == 500 and "tags=weights" in answer["error"]["message"]
        assert (await call("POST", url + "/collective_rpc", body={"method": "exit"}))[0] == 400
        assert (await call("POST", url + "/wake_up?tags=lora"))[0] == 400
        assert (await call("GET", url + "/is_sleeping"))[1]["is_sleeping"] is True


async def test_without_sleep_mode_or_with_a_bad_level_sleep_is_refused_and_nothing_changes() -> None:
    async with serve(SleepMode()) as url:
        status, answer = await call("POST", url + "/sleep?level=1")
        assert status == 400 and "--enable-sleep-mode" in answer["error"]["message"]
        assert (await call("GET", url + "/is_sleeping"))[1]["is_sleeping"] is False
    async with serve(SleepMode(enabled=True)) as url:
        for level in ("3", "x" * 5000, "-1"):
            status, answer = await call("POST", url + f"/sleep?level={level}")
            assert status == 400 and len(answer["error"]["message"]) < 100
        assert (await call("POST", url + "/v1/completions"))[0] == 200


async def test_the_sleep_routes_need_the_engine_key() -> None:
    async with serve(SleepMode(enabled=True), key="k") as url:
        assert (await call("POST", url + "/sleep?level=1"))[0] == 401
        assert (await call("POST", url + "/sleep?level=1", key="k"))[0] == 200
        assert (await call("GET", url + "/is_sleeping", key="k"))[1]["is_sleeping"] is True


def test_the_flags_make_the_sleep_mode() -> None:
    a = parse_args(["--model", "m", "--enable-sleep-mode", "--wake-seconds", "2", "--sleep-leak-mb", "5"])
    assert (a.enable_sleep_mode, a.wake_seconds, a.sleep_leak_mb) == (True, 2.0, 5)
    with pytest.raises(SystemExit):
        parse_args(["--model", "m", "--wake-seconds", "-1"])
