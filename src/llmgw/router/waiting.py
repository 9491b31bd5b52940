"""The routing table as it follows the control plane, and requests waiting for a model's first ready replica
(a load on demand, a restart): how long, how many, and what those that cannot wait are told."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

from aiohttp import web

from llmgw.config.server import RouterConfig
from llmgw.router.context import RequestContext
from llmgw.router.errors import RETRY_AFTER_S, openai_error
from llmgw.router.proxy import CLIENT_CLOSED
from llmgw.router.state import Readiness
from llmgw.router.table import RoutingTable
from llmgw.router.tenant_words import model_state

WAIT_POLL_S = 0.5  # real seconds between looks at the table while a load is awaited
REAL_WAIT_CAP = 20.0  # and never more than this many load_waits of real time, whatever the injected clock says


class ReadyWait:
    def __init__(self, state: Readiness, table: RoutingTable, cfg: RouterConfig, load_wait: float) -> None:
        self.state = state
        self.table = table
        self.cfg = cfg
        self.load_wait = load_wait
        self.waiting: Counter[str] = Counter()  # per model, requests waiting for a replica to become ready
        self.changed = asyncio.Event()  # set, and replaced, whenever the table changes
        self._hung: tuple[int, dict[str, str]] = (-1, {})  # (generation, models whose every replica stopped answering)
        # told of each wait for an on-demand model (key, model, when it began, how long): who asked for its load
        self.on_waited: Callable[[str, str, float, float], None] | None = None

    def refresh(self) -> None:
        """The table follows the control plane's ready replicas; waiters look again when it changed."""
        generation = self.state.generation()
        if self.table.generation == generation:
            return
        self.table.update(generation, self.state.ready())
        self.changed.set()
        self.changed = asyncio.Event()

    def not_answering(self, model: str) -> str | None:
        """Why every replica of the model is unresponsive (none ready, none loading); None when not so. Asked of the
        control plane's view once per generation of it."""
        generation = self.state.generation()
        if self._hung[0] != generation:
            self._hung = (generation, self.state.not_answering())
        return self._hung[1].get(model)

    async def until_ready(self, ctx: RequestContext) -> web.StreamResponse | None:
        """For a model with no replica in the table: None once one is ready, else the answer (nothing answering,
        too many waiting, still not ready after load_wait, the client gone)."""
        model, spec = ctx.spec.name, ctx.spec
        hung = self.not_answering(model)
        if hung is not None:  # nothing is loading: waiting out load_wait would only hold the client
            # the replicas' words (ids, ranks, probes) are the operator's: ctl explain, the dashboard
            return openai_error(503, f"no replica of {model} is answering its health checks; the operator can see "
                                f"why (llmgw ctl explain {model})", "service_unavailable", "model_not_answering",
                                headers={"Retry-After": str(RETRY_AFTER_S)})
        if spec.on_demand:
            self.state.want(model)
        if self.waiting[model] >= self.cfg.max_waiting:
            return openai_error(
                429, f"too many requests waiting for {model} to load ({self.waiting[model]}): try again shortly",
                "rate_limit_exceeded", "too_many_waiting", headers={"Retry-After": str(RETRY_AFTER_S)})
        clock = self.state.clock
        waited_from, began = clock.monotonic(), clock.now()
        self.waiting[model] += 1
        try:
            ready = await self._wait(model, ctx.request)
        finally:
            self.waiting[model] -= 1
            if spec.on_demand and self.on_waited is not None:  # served, gone or timed out: it asked all the same
                self.on_waited(ctx.key.id, model, began, clock.monotonic() - waited_from)
        ctx.m.queue_s += clock.monotonic() - waited_from
        if ready is None:  # nobody to answer: recorded as the client's leaving
            return web.Response(status=CLIENT_CLOSED)
        if ready:
            return None
        # model_loading only for a load on demand; a model that should be serving and has no ready replica
        # (a dead worker, a failed placement) says so, with the control plane's explanation
        why, code = ("the model is loading", "model_loading") if spec.on_demand else (
            "no replica of the model is ready", "no_ready_replica")
        # by phase and reason code: the control plane's own lines name replicas, nodes and hub details
        return openai_error(503, f"{why}: {model_state(await self.state.explain(model))}", "service_unavailable", code,
                            headers={"Retry-After": str(RETRY_AFTER_S)})

    async def _wait(self, model: str, request: web.Request) -> bool | None:
        """Up to load_wait by the injected clock (a test drives it); the table is looked at again whenever the
        control plane says something changed, and at least every WAIT_POLL_S of real time. None: the client went
        away meanwhile (it stops waiting, and asks for nothing more)."""
        clock = self.state.clock
        loop = asyncio.get_running_loop()
        deadline, real_deadline = clock.monotonic() + self.load_wait, loop.time() + self.load_wait * REAL_WAIT_CAP
        while True:
            self.refresh()
            if self.table.pick(model) is not None:
                return True
            if request.transport is None or request.transport.is_closing():
                return None
            left = deadline - clock.monotonic()
            if left <= 0 or loop.time() >= real_deadline:  # a clock nobody moves must not hold a request forever
                return False
            try:
                await asyncio.wait_for(self.changed.wait(), min(left, WAIT_POLL_S))
            except TimeoutError:
                pass
