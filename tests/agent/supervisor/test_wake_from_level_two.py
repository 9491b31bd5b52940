"""The agent's wake from level 2, against a played engine: vLLM's documented calls in their order, each checked,
and a step that fails fails the wake with SleepFailed and the engine's words; a level-1 sleeper is woken by the
bare wake alone."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web

from llmgw.agent.engines.sim import SLEEP as SIM_SLEEP
from llmgw.agent.engines.vllm import SLEEP
from llmgw.agent.supervisor.sleeping import Engine, ShardSleep, outcome, wake
from llmgw.core.reasons import Reason
from tests.harness import served

WHOLE = ["/wake_up?tags=weights", '/collective_rpc {"method": "reload_weights"}', "/wake_up?tags=kv_cache",
         "/reset_prefix_cache"]


async def wake_against(level: int, broken: str = "", answer: str = "") -> tuple[list[str], tuple[str, str, str] | None]:
    """Wake a played vLLM from `level`: the calls it got, and the wake's outcome. The call to `broken` answers 500,
    or 200 with `answer` where one is given."""
    calls: list[str] = []

    async def engine(request: web.Request) -> web.StreamResponse:
        body = (await request.read()).decode()
        calls.append(request.path_qs + (f" {body}" if body else ""))
        if request.path_qs == broken:
            return web.Response(text=answer) if answer else web.Response(status=500, text="engine core died")
        if request.path == "/is_sleeping":
            return web.json_response({"is_sleeping": False})
        if request.path_qs == "/reset_prefix_cache":
            return web.json_response({"success": True})
        if request.path == "/wake_up":
            return web.json_response({"status": "sleeping" if "weights" in request.path_qs else "awake"})
        return web.json_response({"results": [None]})

    async with served(engine) as url, aiohttp.ClientSession() as http:
        s = ShardSleep(level=level, waking=True)
        s.task = asyncio.create_task(wake(Engine(http, url, "", SLEEP), level))
        await asyncio.wait([s.task])
        return calls, outcome(s)


async def test_a_level_two_sleeper_is_woken_by_the_whole_sequence() -> None:
    calls, got = await wake_against(2)
    assert calls == [*WHOLE, "/is_sleeping"]
    assert got == ("starting", "", "woken: waiting for health")


async def test_a_level_one_sleeper_is_woken_by_the_bare_wake() -> None:
    calls, got = await wake_against(1)
    assert calls == ["/wake_up", "/is_sleeping"]
    assert got == ("starting", "", "woken: waiting for health")


@pytest.mark.parametrize("broken, answer, words", [
    ("/wake_up?tags=weights", "", "/wake_up?tags=weights answered 500: engine core died"),
    ("/collective_rpc", "", "/collective_rpc answered 500: engine core died"),
    ("/wake_up?tags=kv_cache", '{"status": "sleeping"}', '/wake_up?tags=kv_cache did not give status "awake"'),
    ("/reset_prefix_cache", '{"success": false}', "/reset_prefix_cache did not give success true"),
    ("/reset_prefix_cache", "not json", "/reset_prefix_cache is not JSON: not json"),
])
async def test_a_failed_step_fails_the_wake_with_its_words(broken: str, answer: str, words: str) -> None:
    calls, got = await wake_against(2, broken, answer)
    assert got is not None and got[:2] == ("failed", Reason.SleepFailed), got
    assert got[2].startswith(f"could not wake: {words}"), got
    assert "/is_sleeping" not in calls  # nothing after the failed step


def test_the_sim_is_woken_as_vllm_is() -> None:
    assert SIM_SLEEP.deep_wake == SLEEP.deep_wake
