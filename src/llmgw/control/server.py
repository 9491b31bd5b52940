"""`llmgw server`: one process, up to four listeners, one reconcile loop."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from aiohttp import web

from llmgw.config.server import ServerConfig
from llmgw.config.types import split_listen
from llmgw.control.admin_api import admin_app, metrics_routes
from llmgw.control.agent_api import agent_app
from llmgw.control.plane import ControlPlane
from llmgw.core.clock import Clock
from llmgw.pki.tls import server_context
from llmgw.router.app import Router
from llmgw.router.keys import KeyRing
from llmgw.router.state import LocalState
from llmgw.router.worker import spawn_workers, stop_workers
from llmgw.store.sqlite import SqliteStore

log = logging.getLogger(__name__)


async def _site(runner: web.AppRunner, listen: str, **kw: object) -> None:
    await runner.setup()
    host, port = split_listen(listen)
    await web.TCPSite(runner, host, port, **kw).start()  # type: ignore[arg-type]


async def serve(cfg: ServerConfig, clock: Clock, stop: asyncio.Event, config_path: str | None = None) -> None:
    # Everything that can fail on bad input fails here, before anything listens.
    tls = server_context(Path(cfg.tls.cert), Path(cfg.tls.key), Path(cfg.tls.ca), require_client=True)
    store = SqliteStore(cfg.store.path).open()
    plane = ControlPlane(cfg, store, clock)
    plane.load()
    keys = KeyRing(store)
    router = Router(LocalState(plane), keys, cfg.router, cfg.load_wait, cfg.max_body)

    runners = [
        web.AppRunner(agent_app(plane), access_log=None),
        web.AppRunner(router.app(), access_log=None),
        web.AppRunner(admin_app(plane), access_log=None),
    ]
    await _site(runners[0], cfg.agent_listen, ssl_context=tls)
    await _site(runners[1], cfg.api_listen, reuse_port=True)
    await _site(runners[2], cfg.admin_listen)
    if cfg.metrics_listen:
        m = web.Application()
        m.add_routes(metrics_routes(plane))
        runners.append(web.AppRunner(m, access_log=None))
        await _site(runners[-1], cfg.metrics_listen)
    log.info("listening: agents %s (mTLS), API %s, admin %s", cfg.agent_listen, cfg.api_listen, cfg.admin_listen)

    async def loop() -> None:
        while True:
            try:
                plane.reconcile_once()
                router.refresh()
            except Exception:  # a failed pass is logged and retried on the next tick, never swallowed silently
                log.exception("reconcile pass failed")
            await asyncio.sleep(cfg.reconcile_interval)

    tasks = [asyncio.create_task(loop()), asyncio.create_task(router.flush_usage())]
    workers = spawn_workers(config_path, cfg.api_workers - 1) if config_path else []
    try:
        await stop.wait()
    finally:
        stop_workers(workers)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for r in runners:
            await r.cleanup()
        await router.close()
        store.close()
