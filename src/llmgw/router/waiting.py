"""The routing table as it follows the control plane, and requests waiting for a model's first ready replica
(a load on demand, a restart): how long, how many, and what those that cannot wait are told."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

from aiohttp import web

from llmgw.api.router import ModelExplanation
from llmgw.config.server import RouterConfig
from llmgw.records.state import Phase
from llmgw.router.context import RequestContext
from llmgw.router.errors import RETRY_AFTER_S, openai_error
from llmgw.router.proxy import CLIENT_CLOSED
from llmgw.router.state import Readiness
from llmgw.router.table import RoutingTable
from llmgw.router.tenant_words import model_state

WAIT_POLL_S = 0.5  # real seconds between looks at the table while a load is awaited
REAL_WAIT_CAP = 20.0  # and never more than this many times the hold of real time, whatever the injected clock says
# a model whose load is measured is waited for that long times MARGIN plus SLACK_S (a load may take a little longer
# than its mean); one not measured yet, as long as a replica of it is on its way, looked at every ON_ITS_WAY_S
MARGIN = 1.25
SLACK_S = 10.0
ON_ITS_WAY_S = 10.0
# a stream waiting this long for its model gets its answer begun (200, an event stream) and a comment line every
# KEEPALIVE_EVERY_S after, so proxies and clients with read timeouts shorter than the load do not cut it
KEEPALIVE_AFTER_S = 10.0
KEEPALIVE_EVERY_S = 10.0
KEEPALIVE = b": waiting for the model to be ready\n\n"


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
        # per model: (the routing table's generation, when asked, whether a replica is on its way): every waiting
        # request asks every ON_ITS_WAY_S, and a worker asks the control plane over HTTP, so one answer serves all
        self._ways: dict[str, tuple[int, float, bool]] = {}

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
        hold, measured = self.hold_for(model)
        self.waiting[model] += 1
        try:
            ready = await self._wait(model, ctx, hold)
            bound = max(self.load_wait, self.cfg.max_load_wait)
            while ready is False and measured is None and clock.monotonic() - waited_from < bound:
                # nothing measured yet: held while a replica of it is on its way (placed, loading), to the bound
                if not await self._on_its_way(model):
                    break
                left = bound - (clock.monotonic() - waited_from)
                ready = await self._wait(model, ctx, min(ON_ITS_WAY_S, left))
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
        if measured is not None:  # the estimate the hold followed, so a client can size its next wait
            why += f" (it takes about {measured:.0f}s here; waited {clock.monotonic() - waited_from:.0f}s)"
        # by phase and reason code: the control plane's own lines name replicas, nodes and hub details
        return openai_error(503, f"{why}: {model_state(await self.state.explain(model))}", "service_unavailable", code,
                            headers={"Retry-After": str(RETRY_AFTER_S)})

    async def _on_its_way(self, model: str) -> bool:
        """on_its_way() of the control plane's explanation, asked at most once a second per model and generation."""
        generation, now = self.state.generation(), self.state.clock.monotonic()
        known = self._ways.get(model)
        if known is not None and known[0] == generation and now - known[1] < 1.0:
            return known[2]
        way = on_its_way(await self.state.explain(model))
        if len(self._ways) > 4096:  # bounded: models come and go
            self._ways.clear()
        self._ways[model] = (generation, now, way)
        return way

    async def _keep_alive(self, ctx: RequestContext) -> bool:
        """A stream that has waited KEEPALIVE_AFTER_S has its answer begun, and gets a comment line every
        KEEPALIVE_EVERY_S (an event stream's comments, which clients skip); False once the client cannot be
        written to."""
        if ctx.payload.get("stream") is not True:
            return True
        now = self.state.clock.monotonic()
        try:
            if ctx.early is None:
                if now - ctx.m.start < KEEPALIVE_AFTER_S:
                    return True
                ctx.early = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream",
                                                                    "Cache-Control": "no-cache", **ctx.rate})
                await ctx.early.prepare(ctx.request)
            elif now - ctx.kept_alive < KEEPALIVE_EVERY_S:
                return True
            await ctx.early.write(KEEPALIVE)
        except (ConnectionError, RuntimeError):
            return False
        ctx.kept_alive = now
        return True

    def hold_for(self, model: str) -> tuple[float, float | None]:
        """How long a request may wait for the model to become ready, and the measured time that says so: its
        longest measured way to ready (load or wake) with a margin, within [load_wait, max_load_wait]; load_wait
        while nothing is measured (until_ready holds it on while a replica is on its way). Before, every request
        waited load_wait (15 s), so the first client of a model taking a minute to load got a 503."""
        measured = self.state.ready_seconds(model)
        if measured is None:
            return self.load_wait, None
        return min(max(self.load_wait, self.cfg.max_load_wait), max(self.load_wait, measured * MARGIN + SLACK_S)), \
            measured

    async def _wait(self, model: str, ctx: RequestContext, hold: float) -> bool | None:
        """Up to `hold` by the injected clock (a test drives it); the table is looked at again whenever the
        control plane says something changed, and at least every WAIT_POLL_S of real time. None: the client went
        away meanwhile (it stops waiting, and asks for nothing more). A stream kept waiting is kept alive."""
        request = ctx.request
        clock = self.state.clock
        loop = asyncio.get_running_loop()
        deadline, real_deadline = clock.monotonic() + hold, loop.time() + max(hold, WAIT_POLL_S) * REAL_WAIT_CAP
        while True:
            self.refresh()
            if self.table.pick(model) is not None:
                return True
            if request.transport is None or request.transport.is_closing() or not await self._keep_alive(ctx):
                return None
            left = deadline - clock.monotonic()
            if left <= 0 or loop.time() >= real_deadline:  # a clock nobody moves must not hold a request forever
                return False
            try:
                await asyncio.wait_for(self.changed.wait(), min(left, WAIT_POLL_S))
            except TimeoutError:
                pass


def on_its_way(exp: ModelExplanation | None) -> bool:
    """Whether a replica of the model is placed and on its way to ready (loading, waking): worth waiting for."""
    return exp is not None and any(r.phase == Phase.Starting for r in exp.replicas)
