"""Requests in flight are summed over every router process, and a replica is busy from a request's start."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
from aiohttp import web

from llmgw.control.plane import LOCAL, REPORTER_SILENT_AFTER
from llmgw.core.clock import FakeClock
from tests.harness import plane_in
from tests.router.conftest import router_over


def test_a_replica_busy_in_one_worker_stays_busy_whatever_the_others_report(tmp_path: Path) -> None:
    """The defect: each worker's report overwrote the others' counts (`outstanding.update`), so a replica busy in
    one worker looked idle to eviction as soon as another worker reported none on it."""
    p = plane_in(tmp_path)
    p.in_flight("worker-1", {"r": 1}, whole=True)
    p.in_flight("worker-2", {"r": 0, "s": 2}, whole=True)
    p.in_flight(LOCAL, {"r": 1}, whole=False)
    assert p.outstanding() == {"r": 2, "s": 2}
    p.in_flight("worker-1", {}, whole=True)  # its request ended
    assert p.outstanding() == {"r": 1, "s": 2}
    assert p.world().outstanding == {"r": 1, "s": 2}
    assert isinstance(p.clock, FakeClock)
    p.clock.advance(REPORTER_SILENT_AFTER + 1)  # worker-2 died: its counts go with it; ours stay
    assert p.outstanding() == {"r": 1}


async def test_a_replica_is_busy_from_the_start_of_a_request_not_its_end(tmp_path: Path) -> None:
    gate = asyncio.Event()
    started = asyncio.Event()

    async def slow(_: web.Request) -> web.Response:
        started.set()
        await gate.wait()
        return web.json_response({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", slow)
    async with router_over(tmp_path, app) as b:
        async with aiohttp.ClientSession() as s:
            req = asyncio.ensure_future(s.post(
                f"{b.url}/v1/chat/completions", json={"model": "sim-a", "messages": []},
                headers={"Authorization": f"Bearer {b.key}"}))
            await asyncio.wait_for(started.wait(), 10)
            plane = b.router.state.plane  # type: ignore[attr-defined]
            assert plane.outstanding() == {"sim-a-1": 1}
            gate.set()
            resp = await req
            assert resp.status == 200
            resp.release()
        assert plane.outstanding() == {}
