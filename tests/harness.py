"""Real clusters for tests: free ports, planned clusters, an in-process control plane, waiting with deadlines."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from bench.addresses import free_port as free_port  # re-exported: the tests import them from here
from bench.addresses import plan as plan

from llmgw.config.loader import load
from llmgw.config.server import ServerConfig, TLSFiles
from llmgw.control.http.local_state import LocalState
from llmgw.control.plane import ControlPlane
from llmgw.control.server import serve
from llmgw.core.clock import FakeClock, SystemClock
from llmgw.dev.cluster import ClusterPlan, admin_up
from llmgw.router.app import Router
from llmgw.router.keys import KeyRing
from llmgw.store.sqlite import SqliteStore


def plane_in(tmp_path: Path, clock: FakeClock | None = None) -> ControlPlane:
    """A real control plane over a SQLite store in `tmp_path` (loaded from whatever is there), one on-demand model
    "m", a fake clock (`clock`, or a new one) and no listeners: for what the plane decides, not how it is reached."""
    from tests.clusters import model

    cfg = ServerConfig(tls=TLSFiles(ca="x", cert="x", key="x"), models=[model("m", min_=0, max_=1)])
    p = ControlPlane(cfg, SqliteStore(tmp_path / "s.db").open(), clock or FakeClock())
    p.load()
    return p


def local_state(plane: ControlPlane) -> LocalState:
    """The in-process router's view of `plane`, handed the owners it reads and asks, as the server builds it."""
    return LocalState(plane.registry, plane.activity, plane.credentials, plane.limit_counters, plane.storage,
                      plane.ready_times.lines)


@contextlib.asynccontextmanager
async def router_over(plane: ControlPlane) -> AsyncIterator[tuple[str, Router]]:
    """The in-process router over `plane`, as the server builds it, on a free loopback port: (url, router)."""
    cfg = plane.cfg
    router = Router(local_state(plane), KeyRing(plane.store), cfg.router, cfg.load_wait, cfg.max_body)
    runner = web.AppRunner(router.app())
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}", router
    finally:
        await runner.cleanup()
        await router.close()


Said = str | Callable[[], str]  # what is awaited; a callable is asked at the deadline, to say what it saw then


def wait_until(cond: Callable[[], Any], timeout: float, what: Said, interval: float = 0.05) -> Any:
    """Poll cond() from a thread (blocking) until it is truthy; fail with `what` at the deadline. Returns the truthy
    value. An exception from cond() counts as not yet (things may still be starting) and is shown at the deadline."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while True:
        try:
            v = cond()
            if v:
                return v
        except Exception as e:  # the condition may raise while things start
            last_exc = e
        if time.monotonic() >= deadline:
            raise _timed_out(timeout, what, last_exc)
        time.sleep(interval)


def _timed_out(timeout: float, what: Said, last_exc: Exception | None = None) -> AssertionError:
    said = what() if callable(what) else what
    return AssertionError(
        f"timed out after {timeout}s waiting for {said}" + (f" (last error: {last_exc})" if last_exc else "")
    )


def failures_logged(caplog: Any) -> list[str]:
    """Errors and tracebacks llmgw or aiohttp logged during a test. Only theirs: a garbage collector finishing off
    an earlier test's unclosed session logs through asyncio in whatever test happens to be running."""
    return [
        r.getMessage() for r in caplog.records
        if r.name.split(".")[0] in ("llmgw", "aiohttp") and (r.levelno >= logging.ERROR or r.exc_info)
    ]


def holds_for(cond: Callable[[], Any], seconds: float, what: str, interval: float = 0.2) -> None:
    """Check cond() repeatedly for `seconds`; fail at the first time it does not hold (a claim that something
    stays true, e.g. that no timer wrongly runs out, needs the whole window)."""
    deadline = time.monotonic() + seconds
    while True:
        assert cond(), f"no longer true: {what}"
        if time.monotonic() >= deadline:
            return
        time.sleep(interval)


async def await_until(cond: Callable[[], Any], timeout: float, what: Said, interval: float = 0.05) -> Any:
    """wait_until from inside the event loop: cond() may return a value or an awaitable; the loop runs while this
    waits. Returns the truthy value; an exception from cond() fails the test at once."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if inspect.isawaitable(v):
            v = await v
        if v:
            return v
        if time.monotonic() >= deadline:
            raise _timed_out(timeout, what)
        await asyncio.sleep(interval)


class InProcessServer:
    """The real control plane (all listeners) running in this event loop."""

    def __init__(self, p: ClusterPlan) -> None:
        self.plan = p
        self.cfg = load(ServerConfig, p.workdir / "server.yaml")
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> InProcessServer:
        self.task = asyncio.create_task(serve(self.cfg, SystemClock(), self.stop))
        await await_until(lambda: asyncio.to_thread(admin_up, self.plan), 10, "admin API up")
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop.set()
        assert self.task is not None
        await self.task


async def aget(p: ClusterPlan, path: str) -> Any:
    """The management API from async code (urllib in a thread, so the in-process server keeps running)."""
    from llmgw.dev.cluster import admin_get

    return await asyncio.to_thread(admin_get, p, path)


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (a killed child not yet reaped counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


@contextlib.asynccontextmanager
async def served(handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> AsyncIterator[str]:
    """`handler` answering every method and path on a free loopback port: its base URL, for as long as the block
    runs (a hub, a mirror or an origin a test plays itself)."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
