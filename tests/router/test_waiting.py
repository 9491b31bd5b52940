"""Requests waiting for a model to load are bounded per model (429 beyond router.max_waiting, at once), and a
client that goes away stops waiting."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp

from llmgw.config.server import RouterConfig
from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.store.sqlite import SqliteStore
from tests.harness import await_until, local_state
from tests.router.conftest import server_config, serving


async def test_waiting_is_bounded_and_a_client_that_leaves_stops_waiting(tmp_path: Path) -> None:
    cfg = server_config()
    cfg = cfg.model_copy(update={"router": RouterConfig(max_waiting=2), "load_wait": 30.0})
    store = SqliteStore(tmp_path / "llmgw.db").open()
    plane = ControlPlane(cfg, store, FakeClock())  # no nodes: sim-od is asked for and never loads
    plane.load()
    body = {"model": "sim-od", "messages": [{"role": "user", "content": "x"}]}
    try:
        async with serving(local_state(plane), store, cfg, "t") as (url, router, key):
            auth = {"Authorization": f"Bearer {key}"}

            async def ask(session: aiohttp.ClientSession) -> tuple[int, dict[str, Any]]:
                async with session.post(url + "/v1/chat/completions", json=body, headers=auth) as r:
                    return r.status, await r.json()

            sessions = [aiohttp.ClientSession() for _ in range(2)]
            waiters = [asyncio.create_task(ask(s)) for s in sessions]
            await await_until(lambda: router.waiting["sim-od"] == 2, 10, "two requests waiting for sim-od")
            async with aiohttp.ClientSession() as third:
                status, err = await ask(third)
            assert status == 429 and err["error"]["code"] == "too_many_waiting"
            assert "too many requests waiting for sim-od to load (2)" in err["error"]["message"]
            for w in waiters:
                w.cancel()
            for s in sessions:
                await s.close()  # the clients go away
            await await_until(lambda: router.waiting["sim-od"] == 0, 10, "the waiters gone")
    finally:
        store.close()
