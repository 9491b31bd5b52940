"""The check that a sleep freed the GPU memory, against an engine whose /is_sleeping answer is hostile or broken:
a figure no GPU holds (past what a float carries), a negative one, one that is not a number. Each fails the sleep
with SleepFailed and the engine's words; none is taken as memory freed, and none escapes as an exception."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from aiohttp import web

from llmgw.agent.engines.base import SleepControl
from llmgw.agent.supervisor.sleeping import Engine, ShardSleep, outcome, put_to_sleep
from llmgw.core.reasons import Reason
from tests.harness import served

AWAKE = 1000 << 20


async def sleep_against(awake: object, asleep: object) -> tuple[str, str, str] | None:
    """Put a played engine to sleep: it says it holds `awake` bytes before, `asleep` after (raw JSON values)."""
    level = 0

    async def engine(request: web.Request) -> web.StreamResponse:
        nonlocal level
        if request.path == "/sleep":
            level = int(request.query["level"])
            return web.Response()
        if request.path == "/wake_up":
            level = 0
            return web.Response()
        held = asleep if level else awake
        return web.Response(text=f'{{"is_sleeping": {json.dumps(level > 0)}, "gpu_memory_used_bytes": {held}}}')

    async with served(engine) as url, aiohttp.ClientSession() as http:
        s = ShardSleep()
        ctl = SleepControl(memory_field="gpu_memory_used_bytes")
        s.task = asyncio.create_task(put_to_sleep(Engine(http, url, "", ctl), 1))
        await asyncio.wait([s.task])
        return outcome(s)


@pytest.mark.parametrize("awake, asleep", [
    (10**400, 5),  # more than a float holds
    (AWAKE, 10**400),
    (AWAKE, -1),
    (AWAKE, '"0"'),
    (AWAKE, "true"),
    (AWAKE, "null"),
])
async def test_a_memory_figure_no_engine_holds_fails_the_sleep(awake: object, asleep: object) -> None:
    got = await sleep_against(awake, asleep)
    assert got is not None and got[:2] == ("failed", Reason.SleepFailed), got


async def test_a_plain_answer_still_sleeps() -> None:
    said = "asleep at level 1: 0 MiB of 1000 MiB still held"
    assert await sleep_against(AWAKE, 0) == ("sleeping", Reason.Sleeping, said)
