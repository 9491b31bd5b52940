"""Router workers: extra processes that serve the OpenAI API on the same port, for more than one core. The server
starts and stops them; each one is a router over RemoteState, behind the same listener limits as the server."""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

from llmgw.config.server import ServerConfig
from llmgw.config.types import split_listen
from llmgw.control.http.admin_auth import read_token
from llmgw.control.http.api_listener import api_limiter
from llmgw.core.clock import Clock
from llmgw.net.listeners import raise_fd_limit, start_listener
from llmgw.router.app import Router
from llmgw.router.keys import KeyRing
from llmgw.router.long_marks import long_after
from llmgw.router.state import RemoteState
from llmgw.store.opening import open_store

log = logging.getLogger(__name__)

VIEW_POLL_S = 0.25


PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Ask the kernel for SIGTERM when the server that started this worker dies, however it dies (Linux). Set
    here, after exec, rather than in a preexec_fn, which is unsafe in a process with threads; the race with a
    parent dying first is closed by comparing getppid() afterwards."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # elsewhere the worker's own watch on its parent (serve_worker) still ends it


def spawn_workers(config_path: str, n: int) -> list[subprocess.Popen[bytes]]:
    return [
        subprocess.Popen(
            [sys.executable, "-m", "llmgw.cli.main", "router-worker", "-c", config_path, "--parent", str(os.getpid())],
            stdin=subprocess.DEVNULL,
        )
        for _ in range(n)
    ]


async def stop_workers(workers: list[subprocess.Popen[bytes]], grace: float = 10.0) -> None:
    """SIGTERM, then wait without blocking the event loop (a worker's last usage report needs it), then SIGKILL."""
    for w in workers:
        if w.poll() is None:
            w.send_signal(signal.SIGTERM)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    while any(w.poll() is None for w in workers) and loop.time() < deadline:
        await asyncio.sleep(0.05)
    for w in workers:
        if w.poll() is None:
            w.kill()
            w.wait()


async def watch_parent(parent: int, stop: asyncio.Event) -> None:
    """Stop when the server that started this worker is gone: a worker must never serve stale state alone."""
    _die_with_parent()
    while not stop.is_set():
        if os.getppid() != parent:
            log.error("router worker %d: the server (pid %d) is gone; stopping", os.getpid(), parent)
            stop.set()
            return
        await asyncio.sleep(0.5)


async def serve_worker(cfg: ServerConfig, clock: Clock, stop: asyncio.Event, parent: int | None = None) -> None:
    host, port = split_listen(cfg.admin_listen)
    token = read_token(Path(cfg.token_path()))
    state = RemoteState(f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{port}", clock, token)
    store = open_store(cfg.store)  # read for API keys; the control plane is the writer
    router = Router(state, KeyRing(store), cfg.router, cfg.load_wait, cfg.max_body, Path(cfg.journal_path()),
                    currency=cfg.chargeback.currency, long_after=long_after(cfg.chargeback.settle_after))
    await state.poll()
    lim = cfg.connections
    cap = min(lim.api_connections, max(8, raise_fd_limit() - 256))
    runner = await start_listener(router.app(), cfg.api_listen, api_limiter(lim, cap), lim.header_timeout,
                                  reuse_port=True)
    log.info("router worker %d serving %s", os.getpid(), cfg.api_listen)

    async def poll() -> None:
        while True:
            await asyncio.sleep(VIEW_POLL_S)
            try:
                await state.poll()
            except Exception as e:  # the control plane restarting: keep the last table and try again
                log.warning("router view: %s", e)

    tasks = [asyncio.create_task(poll()), asyncio.create_task(router.flush_usage())]
    if parent is not None:
        tasks.append(asyncio.create_task(watch_parent(parent, stop)))
    try:
        await stop.wait()
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await runner.cleanup()
        await router.close()
        await state.close()
        store.close()
