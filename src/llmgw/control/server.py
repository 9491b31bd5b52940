"""`llmgw server`: one process, up to four listeners, one reconcile loop."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
from asyncio import sslproto
from pathlib import Path

from aiohttp import web

from llmgw.config.server import Limits, ServerConfig
from llmgw.config.types import split_listen
from llmgw.control.admin_api import admin_app, metrics_routes
from llmgw.control.admin_auth import allowed_hosts, load_or_create_token
from llmgw.control.admission import parse_networks
from llmgw.control.agent_api import agent_app
from llmgw.control.listeners import (
    Limiter,
    QuietErrors,
    fit,
    peer_node,
    per_client,
    raise_fd_limit,
    refusal,
    start_listener,
)
from llmgw.control.local_state import LocalState
from llmgw.control.plane import ControlPlane
from llmgw.control.workers import spawn_workers, stop_workers
from llmgw.control.writer import StoreWriter
from llmgw.core.clock import Clock
from llmgw.core.errors import StoreError
from llmgw.pki.tls import server_context
from llmgw.router.app import Router
from llmgw.router.errors import openai_error
from llmgw.router.keys import KeyRing
from llmgw.store.opening import hold_sqlite, open_store

log = logging.getLogger(__name__)
RETENTION_EVERY_S = 3600.0
AGENT_CONNECTIONS_PER_NODE = 4
KICKED_PASS_GAP_S = 0.05


def api_refusal() -> bytes:
    body = openai_error(503, "too many connections: try again shortly", "service_unavailable", "too_many_connections")
    assert isinstance(body.body, bytes)
    return refusal(body.body)


def api_limiter(limits: Limits, cap: int) -> Limiter:
    """The API listener's limiter, as the server, each API worker and the router bench start it: `cap`
    connections in all (the configured number, fitted to the open-file limit), a quarter at most per client."""
    return Limiter("api", cap, per_client(limits.api_connections_per_client, cap), api_refusal())


GC_THRESHOLDS = (50_000, 50, 100)  # young collections 70x rarer than Python's default; old ones far rarer


def quiet_gc() -> None:
    """Fewer and shorter collector pauses. Every heartbeat replaces a node's record (a few hundred objects); with
    Python's defaults, at 400 heartbeats a second over 2,000 nodes the cycle collector stopped the event loop for
    up to 260 ms (bench/heartbeats.py: p99 of heartbeats 360 ms, their median 1 ms). What the start loaded (the
    catalog, the store's records, imported modules) is moved out of its reach; records are freed by reference
    counting as ever (they hold no cycles), and collections still run, less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


TLS_READ_BUFFER = 32 * 1024  # two TLS records; asyncio's own is 256 KiB for every TLS connection


def small_tls_buffers() -> None:
    """Every agent keeps a TLS connection open to the control plane, and asyncio gives each a 256 KiB read buffer
    of its own: at 10,000 nodes, 2.5 GiB of buffers (bench/heartbeats.py: 740 MiB resident at 2,000 nodes). A TLS
    record is at most 16 KiB; reads of 32 KiB lose nothing."""
    sslproto.SSLProtocol.max_size = TLS_READ_BUFFER


async def serve(cfg: ServerConfig, clock: Clock, stop: asyncio.Event, config_path: str | None = None) -> None:
    # Everything that can fail on bad input fails here, before anything listens.
    tls = server_context(Path(cfg.tls.cert), Path(cfg.tls.key), Path(cfg.tls.ca), require_client=True)
    token = load_or_create_token(Path(cfg.token_path()))
    held = hold_sqlite(cfg.store)  # a second server on the same SQLite file is refused, not run
    store = open_store(cfg.store)
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(QuietErrors(loop))
    writer = StoreWriter(clock)
    plane = ControlPlane(cfg, store, clock, writer=writer)
    plane.load()
    quiet_gc()
    small_tls_buffers()
    keys = KeyRing(store)
    router = Router(
        LocalState(plane), keys, cfg.router, cfg.load_wait, cfg.max_body, Path(cfg.journal_path()), adopt=True
    )
    router.ledger.on_replayed = plane.seed_budgets
    if router.ledger.adopt_orphans():  # what a killed predecessor (or its workers) journaled and never recorded
        # recorded before anything is served, so the budgets, read again once it is, count it exactly (else at
        # the flush that lands it)
        try:
            await router.ledger.flush()
        except StoreError as e:  # read again after a later flush
            log.warning("budgets not read again after recording what the journal held: %s", e)
    plane.gauges["llmgw_usage_unflushed"] = (
        "Requests served whose usage is not in the store yet (grows while the store fails)",
        lambda: float(router.ledger.unflushed),
    )

    lim = cfg.limits
    caps = fit(
        {
            "agent": lim.agent_connections,
            "api": lim.api_connections,
            "admin": lim.admin_connections,
            **({"metrics": lim.metrics_connections} if cfg.metrics_listen else {}),
        },
        raise_fd_limit(),
    )
    plain = refusal(json.dumps({"error": "too many connections"}).encode())
    listeners = [split_listen(x) for x in (cfg.agent_listen, cfg.api_listen, cfg.admin_listen, cfg.metrics_listen) if x]
    admin_host = split_listen(cfg.admin_listen)[0]
    hosts = allowed_hosts(admin_host, cfg.admin_hosts)
    any_ip = admin_host in ("", "0.0.0.0", "::")
    timeout = lim.header_timeout
    runners = [
        await start_listener(
            agent_app(plane, listeners, parse_networks(cfg.node_networks)),
            cfg.agent_listen,
            # one node holds a few connections at most, whoever it claims to be in the body
            Limiter("agent", caps["agent"], AGENT_CONNECTIONS_PER_NODE, plain, client_of=peer_node),
            max(timeout, 3 * cfg.heartbeat_interval),  # an agent's kept-alive connection lasts between heartbeats
            tls=tls,
        ),
        await start_listener(
            router.app(),
            cfg.api_listen,
            api_limiter(lim, caps["api"]),
            timeout,
            reuse_port=True,
        ),
        await start_listener(
            admin_app(plane, token, hosts, any_ip), cfg.admin_listen,
            Limiter("admin", caps["admin"], caps["admin"], plain), timeout,
        ),
    ]
    if cfg.metrics_listen:
        m = web.Application()
        m.add_routes(metrics_routes(plane))
        runners.append(
            await start_listener(
                m, cfg.metrics_listen, Limiter("metrics", caps["metrics"], caps["metrics"], plain), timeout
            )
        )
    log.info("listening: agents %s (mTLS), API %s, admin %s", cfg.agent_listen, cfg.api_listen, cfg.admin_listen)

    async def reconcile_loop() -> None:
        while True:
            plane.take_kick()
            try:
                with contextlib.suppress(StoreError):  # unreachable: the pass goes on with what this server knows
                    await plane.follow_store()
                    await plane.share_activity()
                plane.reconcile_once()
                router.refresh()
            except Exception:  # a failed pass is logged and retried on the next tick, never swallowed silently
                log.exception("reconcile pass failed")
            # every interval, or sooner when kicked (a load asked for, a shard's state reported changed); kicked
            # passes are spaced by KICKED_PASS_GAP_S at least, so a burst of reports is one pass, not one each
            try:
                await asyncio.wait_for(plane.kick.wait(), cfg.reconcile_interval)
                await asyncio.sleep(min(KICKED_PASS_GAP_S, cfg.reconcile_interval))
            except TimeoutError:
                pass

    async def lease_loop() -> None:
        while True:  # renew the lease, or take it when its holder is gone (control/leadership.py)
            await asyncio.sleep(cfg.leader_lease / 3)
            await plane.hold_lease()

    async def retention_loop() -> None:
        while True:  # usage rows and events past their retention go; totals stay
            now = clock.now()
            writer.submit(store.prune, now - cfg.retention.usage, now - cfg.retention.events)
            await asyncio.sleep(RETENTION_EVERY_S)

    tasks = [
        asyncio.create_task(reconcile_loop()),
        asyncio.create_task(router.flush_usage()),
        asyncio.create_task(retention_loop()),
        asyncio.create_task(lease_loop()),
    ]
    workers = spawn_workers(config_path, cfg.api_workers - 1) if config_path else []
    try:
        await stop.wait()
    finally:
        plane.watch.close()  # agents waiting on their shards are answered now, not after their hold
        await stop_workers(workers)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for r in runners:
            await r.cleanup()
        await router.close()
        plane.persist_nodes()
        await asyncio.to_thread(writer.close)
        with contextlib.suppress(StoreError):
            plane.release_lease()
        store.close()
        if held is not None:
            held.close()
