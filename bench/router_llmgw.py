"""(c) of the router bench: llmgw's router served in a process of its own (`python -m bench.router --serve-router`),
with one key and one ready replica in front of the engine stand-in, behind the listener the server gives it."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path
from typing import TYPE_CHECKING

from bench.router_servers import MODEL

if TYPE_CHECKING:
    from llmgw.store.base import Store


def month_of_charges(store: Store, key_id: str, now: float) -> None:
    """A month of hourly charges for `key_id` and 49 other keys, as chargeback leaves them, its mark at now."""
    from llmgw.records.chargeback import ChargeRow
    from llmgw.store.base import hour_of

    keys = [key_id, *(f"other-{i}" for i in range(49))]
    rows = [ChargeRow(hour=h, key_id=k, model=MODEL, gpu_class="H100", busy_s=30.0, load_s=1.0, idle_s=5.0, cost=0.04)
            for h in range(hour_of(now) - 30 * 24, hour_of(now) + 1) for k in keys]
    store.put_charges(rows, [], store.charge_mark(), now)


def serve_router(port: int, upstream: str, key_file: Path, db: Path, use_uvloop: bool,
                 routing: str = "least_loaded", limited: str = "") -> None:
    """Build the control plane and its router through the functions `llmgw server` builds them with, with one key
    and one ready replica, and serve only its API, through the listener the server gives it (connection limiter,
    request bounds), with the server's GC settings."""
    from llmgw.config.server import ModelSpec, Scaling, ServerConfig, StoreConfig, TLSFiles
    from llmgw.control.http.api_listener import api_limiter
    from llmgw.control.server import open_plane, quiet_gc, start_router
    from llmgw.core.clock import SystemClock
    from llmgw.core.conditions import Status
    from llmgw.core.reasons import Reason
    from llmgw.net.listeners import start_listener
    from llmgw.reconcile.intents import Add, Observe
    from llmgw.router.keys import new_key
    from llmgw.store.sqlite import SqliteStore

    clock = SystemClock()
    # TLS files are required by the model but used only by the agent listener, which is not started here.
    cfg = ServerConfig(
        tls=TLSFiles(ca="unused", cert="unused", key="unused"),
        store=StoreConfig(path=str(db)),
        api_listen=f"127.0.0.1:{port}",
        models=[ModelSpec(name=MODEL, source="bench", engine="sim", scaling=Scaling(min=1, max=1),
                          routing="prefix" if routing == "prefix" else "least_loaded")],
    )
    store = SqliteStore(cfg.store.path).open()
    raw, rec = new_key("bench", [], clock)
    if limited:
        from llmgw.core.limits import KeyLimits

        rec.limits = (KeyLimits(rpm=10**9, tpm=10**12, concurrency=10**6, budget=10**15) if limited == "tokens" else
                      KeyLimits(gpu_budget=1e13, cost_budget=1e13))
    if limited == "gpu":
        month_of_charges(store, rec.id, clock.now())
    store.put_key(rec)
    plane = open_plane(cfg, store, clock)  # as `llmgw server`: store writes off the loop
    # No reconcile loop: with no nodes it would rightly retire this replica. Routing, keys and usage are all on.
    plane.registry.apply([Add("bench-0", MODEL, 1, ""),
                          Observe("bench-0", Status.TRUE, Reason.AllShardsReady, "the bench's engine stand-in",
                                  upstream, ())])
    key_file.write_text(raw)
    quiet_gc()  # as the server does once it has loaded

    async def main() -> None:
        router = await start_router(cfg, plane)  # usage journaled per request, beside the store
        # the API listener as the server starts it: its connection limiter, request bounds and 100-continue check
        lim = cfg.connections
        listener = await start_listener(router.app(), cfg.api_listen, api_limiter(lim, lim.api_connections),
                                        lim.header_timeout)
        flush = asyncio.create_task(router.flush_usage())
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        await stop.wait()
        flush.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await flush
        await listener.cleanup()
        await router.close()
        await asyncio.to_thread(plane.writer.close)
        store.close()

    factory = None
    if use_uvloop:
        with contextlib.suppress(ImportError):
            import uvloop

            factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main())
