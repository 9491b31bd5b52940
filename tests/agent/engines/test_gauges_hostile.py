"""A hostile or broken engine /metrics page neither crashes nor blocks the agent, nor touches readiness."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import time
from pathlib import Path

from aiohttp import web

from llmgw.agent.engines import ADAPTERS, LaunchContext
from llmgw.agent.engines.gauges import read_load
from llmgw.agent.engines.sim import GAUGES
from llmgw.agent.supervisor import Supervisor
from llmgw.agent.supervisor.process import ShardProcess
from llmgw.core.clock import FakeClock
from llmgw.wire.messages import ShardSpec
from tests.harness import free_port

# an integer literal too big for a float: int() takes it, float(int) raises OverflowError
HUGE_INT_PAGE = "sim:requests_running 1" + "0" * 400 + "\n"


def test_a_huge_integer_value_is_no_reading_not_an_exception() -> None:
    load = read_load(HUGE_INT_PAGE, GAUGES, 1.0)
    assert load is None or load.running in (None, 1e9)


class _Alive:
    returncode = None
    pid = 0


def _engine(page: str) -> web.Application:
    async def health(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "m"}]})

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=page, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", metrics)
    return app


async def _probe_against(tmp_path: Path, page: str) -> tuple[ShardProcess, Supervisor, web.AppRunner]:
    port = free_port()
    runner = web.AppRunner(_engine(page))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    spec = ShardSpec(replica_id="r1", model="m", engine="sim", source="org/m", rank=0, world_size=1, serve_port=port)
    launch = ADAPTERS["sim"].launch(spec, LaunchContext(binary=sys.executable, model_path="org/m", host="127.0.0.1"))
    assert launch is not None and launch.metrics_path == "/metrics"
    sp = ShardProcess(spec=spec, launch=dataclasses.replace(launch, serves_http=True), log_path=tmp_path / "r1.log",
                      host="127.0.0.1")
    sp.proc = _Alive()  # type: ignore[assignment]
    sp.state = "starting"
    return sp, Supervisor(FakeClock(), tmp_path, "127.0.0.1", lambda s, _: (None, "")), runner


async def test_a_page_with_a_huge_integer_leaves_the_probe_and_readiness_alone(tmp_path: Path) -> None:
    """An OverflowError out of _probe would abort the agent's step before its heartbeat: one engine's page
    would stop its whole node from reporting."""
    sp, s, runner = await _probe_against(tmp_path, HUGE_INT_PAGE)
    try:
        await s._probe(sp)  # must not raise
        assert sp.state == "ready" and sp.load is None
    finally:
        await s.close()
        await runner.cleanup()


async def test_a_hostile_page_within_the_cap_does_not_stall_the_agents_loop(tmp_path: Path) -> None:
    """One ~1 MiB sample line (under METRICS_BODY_MAX) of ~100,000 empty labels, on which prometheus_client's
    parser is quadratic, must not stall the agent's event loop (and its heartbeats) at every probe."""
    labels = ",".join(f'l{i}=""' for i in range(100_000))
    page = "sim:requests_running{" + labels + "} 1\n"
    assert len(page) < 1024 * 1024
    sp, s, runner = await _probe_against(tmp_path, page)
    gaps: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        last = time.monotonic()
        while not done.is_set():
            await asyncio.sleep(0.02)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    t = asyncio.create_task(ticker())
    try:
        await s._probe(sp)
        assert sp.state == "ready"
    finally:
        done.set()
        await t
        await s.close()
        await runner.cleanup()
    assert max(gaps) < 1.5, f"the agent's event loop was blocked for {max(gaps):.1f}s by one metrics page"
