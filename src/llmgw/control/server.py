"""`llmgw server`: one process, up to four listeners, one reconcile loop."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import ssl
from asyncio import sslproto
from pathlib import Path

from aiohttp import web

from llmgw.config.server import ServerConfig
from llmgw.config.types import split_listen
from llmgw.control.chargeback.chargeback import chargeback_loop
from llmgw.control.http.admin_api import admin_app, metrics_routes
from llmgw.control.http.admin_auth import allowed_hosts, load_or_create_token
from llmgw.control.http.agent_api import agent_app
from llmgw.control.http.api_listener import api_limiter
from llmgw.control.http.local_state import LocalState
from llmgw.control.nodes.node_claims import parse_networks
from llmgw.control.plane import ControlPlane
from llmgw.control.storage.writer import StoreWriter
from llmgw.control.workers import spawn_workers, stop_workers
from llmgw.core.clock import Clock
from llmgw.core.errors import StoreError
from llmgw.net.listeners import (
    Limiter,
    Listener,
    QuietErrors,
    fit,
    peer_node,
    raise_fd_limit,
    refusal,
    start_listener,
)
from llmgw.pki.tls import server_context
from llmgw.router.app import Router
from llmgw.router.keys import KeyRing
from llmgw.router.long_marks import long_after
from llmgw.store.base import Store
from llmgw.store.opening import hold_sqlite, open_store

log = logging.getLogger(__name__)
RETENTION_EVERY_S = 3600.0
HUB_EVERY_S = 5.0  # the catalog followed for hub models at least this often
DIGESTS_EVERY_S = 2.0  # the releases' digest lists looked at (each read only when due and needed)
AGENT_CONNECTIONS_PER_NODE = 4
KICKED_PASS_GAP_S = 0.05


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
    plane = open_plane(cfg, store, clock)
    quiet_gc()
    small_tls_buffers()
    router = await start_router(cfg, plane)
    runners = await start_listeners(cfg, plane, router, tls, token)
    log.info("listening: agents %s (mTLS), API %s, admin %s", cfg.agent_listen, cfg.api_listen, cfg.admin_listen)
    tasks = [
        asyncio.create_task(reconcile_loop(plane, router, cfg.reconcile_interval)),
        asyncio.create_task(router.flush_usage()),
        asyncio.create_task(retention_loop(cfg, plane)),
        asyncio.create_task(lease_loop(plane, cfg.leader_lease)),
        asyncio.create_task(hub_loop(plane)),
        asyncio.create_task(digests_loop(plane)),
        asyncio.create_task(chargeback_loop(plane.chargeback)),
    ]
    workers = spawn_workers(config_path, cfg.api_workers - 1) if config_path else []
    try:
        await stop.wait()
    finally:
        plane.registry.watch.close()  # agents waiting on their shards are answered now, not after their hold
        await stop_workers(workers)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for r in runners:
            await r.cleanup()
        await router.close()
        plane.registry.persist_nodes()
        await asyncio.to_thread(plane.writer.close)
        with contextlib.suppress(StoreError):
            plane.following.release_lease()
        store.close()
        if held is not None:
            held.close()


def open_plane(cfg: ServerConfig, store: Store, clock: Clock) -> ControlPlane:
    """The control plane over `store` as this process runs it: its store writes off the event loop (the caller
    closes `plane.writer` last), what the store holds adopted."""
    plane = ControlPlane(cfg, store, clock, writer=StoreWriter(clock))
    plane.load()
    return plane


async def start_router(cfg: ServerConfig, plane: ControlPlane) -> Router:
    """The router in this process, over the plane's owners; what a killed predecessor journaled, recorded."""
    state = LocalState(plane.registry, plane.activity, plane.credentials, plane.limit_counters, plane.storage,
                       plane.ready_times.lines)
    router = Router(state, KeyRing(plane.store), cfg.router, cfg.load_wait, cfg.max_body, Path(cfg.journal_path()),
                    adopt=True, currency=cfg.chargeback.currency, long_after=long_after(cfg.chargeback.settle_after))
    router.usage_journal.on_replayed = plane.following.seed_budgets
    if router.usage_journal.adopt_orphans():  # what a killed predecessor (or its workers) journaled and never recorded
        # recorded before anything is served, so the budgets, read again once it is, count it exactly (else at
        # the flush that lands it)
        try:
            await router.usage_journal.flush()
        except StoreError as e:  # read again after a later flush
            log.warning("budgets not read again after recording what the journal held: %s", e)
    plane.add_gauge("llmgw_usage_unflushed",
                    "Requests served whose usage is not in the store yet (grows while the store fails)",
                    lambda: float(router.usage_journal.unflushed))
    return router


async def start_listeners(cfg: ServerConfig, plane: ControlPlane, router: Router, tls: ssl.SSLContext,
                          token: str) -> list[Listener]:
    """The agents', the API's, the management and (if configured) the metrics listener, each handed the owners
    it uses, within connection caps fitted to the open-file limit."""
    lim = cfg.connections
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
    networks = parse_networks(cfg.node_networks)
    agents = agent_app(plane.registry, plane.heartbeats, plane.credentials, listeners, networks)
    status = plane.status()
    runners = [
        # one node holds a few connections at most, whoever it claims to be in the body; an agent's kept-alive
        # connection lasts between heartbeats
        await start_listener(agents, cfg.agent_listen,
                             Limiter("agent", caps["agent"], AGENT_CONNECTIONS_PER_NODE, plain, client_of=peer_node),
                             max(timeout, 3 * cfg.heartbeat_interval), tls=tls),
        await start_listener(router.app(), cfg.api_listen, api_limiter(lim, caps["api"]), timeout, reuse_port=True),
        await start_listener(admin_app(status, plane.limit_counters, plane.gauges, plane.health, token, hosts, any_ip),
                             cfg.admin_listen, Limiter("admin", caps["admin"], caps["admin"], plain), timeout),
    ]
    if cfg.metrics_listen:
        m = web.Application()
        m.add_routes(metrics_routes(status, plane.gauges, plane.health))
        runners.append(await start_listener(m, cfg.metrics_listen,
                                            Limiter("metrics", caps["metrics"], caps["metrics"], plain), timeout))
    return runners


async def reconcile_loop(plane: ControlPlane, router: Router, interval: float) -> None:
    passes = plane.passes
    while True:
        passes.take_kick()
        try:
            with contextlib.suppress(StoreError):  # unreachable: the pass goes on with what this server knows
                await plane.following.follow_store()
                await plane.following.share_activity()
                await plane.limit_counters.gpu.refresh(plane.storage)  # GPU time charged, for GPU budgets
            passes.reconcile_once()
            plane.chargeback.sample_now()
            router.refresh()
        except Exception:  # a failed pass is logged and retried on the next tick, never swallowed silently
            log.exception("reconcile pass failed")
        # every interval, or sooner when kicked (a load asked for, a shard's state reported changed); kicked
        # passes are spaced by KICKED_PASS_GAP_S at least, so a burst of reports is one pass, not one each
        try:
            await asyncio.wait_for(passes.kick.wait(), interval)
            await asyncio.sleep(min(KICKED_PASS_GAP_S, interval))
        except TimeoutError:
            pass


async def hub_loop(plane: ControlPlane) -> None:
    """Hub models resolved (control/hub/hub_models.py): when the catalog names one, while the hub fails (backing off),
    when nodes report a commit gone; a pass follows a change at once, so a resolved model is placed."""
    hub = plane.hub_models
    while True:
        hub.wake.clear()
        before = hub.states
        wait = HUB_EVERY_S
        try:
            wait = min(wait, await hub.tick(plane.registry.models))
        except Exception:  # logged and tried again, never swallowed silently
            log.exception("resolving hub models failed")
        if hub.states != before:
            plane.passes.kick.kick()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(hub.wake.wait(), max(wait, 0.05))


async def digests_loop(plane: ControlPlane) -> None:
    """Each engine release's digest list read for the fleet (control/nodes/release_digests.py), when due; the
    nodes' next answers carry what it gave."""
    digests, sources = plane.release_digests, plane.cfg.engine_sources()
    while True:
        wait = DIGESTS_EVERY_S
        # the engines some live node has yet to install (it reports them not running): only their lists are read
        needed = {e.name for n in plane.registry.nodes.values() if not n.lost for e in n.report.engines if not e.runs}
        try:
            wait = min(wait, await digests.tick(sources, needed))
        except Exception:  # logged and tried again, never swallowed silently
            log.exception("reading the releases' digest lists failed")
        await asyncio.sleep(max(wait, 1.0))


async def lease_loop(plane: ControlPlane, lease: float) -> None:
    while True:  # extend the lease, or take it when its holder is gone (control/storage/leadership.py)
        await asyncio.sleep(lease / 3)
        await plane.following.hold_lease()


async def retention_loop(cfg: ServerConfig, plane: ControlPlane) -> None:
    while True:  # usage rows and events past their retention go; totals stay
        now = plane.clock.now()
        plane.writer.submit(plane.store.prune, now - cfg.retention.usage, now - cfg.retention.events)
        await asyncio.sleep(RETENTION_EVERY_S)
