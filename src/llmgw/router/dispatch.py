"""Forward with retry: a request sent to the replica chosen for it, to another while none was reached, its usage
record begun (journaled) before anything is sent; the end stage (ending.py) finishes it."""

from __future__ import annotations

import json
import logging

import aiohttp
from aiohttp import web

from llmgw.config.server import RouterConfig
from llmgw.core.errors import ClientGone, ConnectFailed, StreamBroken
from llmgw.router.adapters import renamed
from llmgw.router.choice import Chooser
from llmgw.router.context import RequestContext
from llmgw.router.errors import MESSAGES, RETRY_AFTER_S, openai_error, unsupported
from llmgw.router.message_start import MessageStart, count_input_tokens
from llmgw.router.prefix import chain, prompt_text
from llmgw.router.proxy import (
    CLIENT_CLOSED,
    NOT_SERVED,
    Attempt,
    Outcome,
    Timeouts,
    broken,
    engine_headers,
    forward,
)
from llmgw.router.scoring import RouteDecision
from llmgw.router.state import ReplicaUse
from llmgw.router.table import EJECT_AFTER, UNSERVED_S, Route, RoutingTable
from llmgw.router.usage import StreamUsage
from llmgw.router.usage_journal import UNKNOWN, UsageJournal
from llmgw.store.base import Usage, new_usage_id

log = logging.getLogger(__name__)

# OpenAI's streams that carry usage only when asked (stream_options); the Responses and Messages APIs' streams always
# do, in events a client needs (response.completed, message_start, message_delta), which must never be kept from it
USAGE_ASKED = ("/v1/chat/completions", "/v1/completions")
ENGINE_KEEPALIVE_S = 4.0  # under the 5 s after which the engines close an idle connection


class Dispatcher:
    def __init__(self, state: ReplicaUse, table: RoutingTable, chooser: Chooser, usage_journal: UsageJournal,
                 cfg: RouterConfig, worker: str) -> None:
        self.state = state
        self.table = table
        self.chooser = chooser
        self.usage_journal = usage_journal
        self.cfg = cfg
        self.worker = worker  # which API worker answered, for operators chasing one bad process
        self.timeouts = Timeouts(cfg.connect_timeout, cfg.first_byte_timeout, cfg.between_chunks_timeout,
                                 cfg.queue_timeout)
        self.session: aiohttp.ClientSession | None = None

    async def serve(self, ctx: RequestContext) -> web.StreamResponse:
        """Forward to the replica chosen, and to another while none was reached; the engine's answer, or the
        router's where no engine had the request."""
        model, path = ctx.spec.name, ctx.request.path
        if self.table.unserved(model, path, self.state.clock.monotonic()):  # sent nowhere: it costs nothing
            return unsupported(model, path, "its engine said so")
        self._prepare(ctx)
        while True:
            route, decision = self.chooser.choose(model, ctx.tried, ctx.blocks, ctx.spec.routing, path)
            ctx.route = route
            if route is None:
                return self._unreachable()
            said = self._said(ctx.rate, decision, route, len(ctx.blocks))
            self._sent(ctx, route)
            try:
                ctx.outcome = await forward(Attempt(
                    ctx.request, self._session(), route.url(path), ctx.body, ctx.stream, self.timeouts,
                    watch=ctx.watch, secret=route.secret, trace=ctx.m, said=said,
                    fresh_for_stream=route.closes_after_stream, opening=self._opening(ctx, route),
                    rename=renamed(ctx.spec, ctx.served), early=ctx.early,
                ))
            except ConnectFailed as e:
                ctx.reached, ctx.watch = False, None  # nothing was sent: safe to try elsewhere
                log.warning("replica %s not reached (%s); trying another", route.replica_id, e)
                continue
            except StreamBroken as e:
                log.warning("replica %s: %s (not retried: it had the request)", route.replica_id, e)
                ctx.outcome = broken(e)
            except ClientGone:  # given up at the engine too: recorded as the client's leaving, at what it reserved
                # (the engine had it and may have done most of it; 0 would let leaving just before the answer pass
                # day and month token budgets, which are summed from the records)
                ctx.outcome = Outcome(CLIENT_CLOSED, ctx.cost, 0, response=web.Response(status=CLIENT_CLOSED))
            finally:
                self._returned(ctx, route)
            return self._answer(ctx, route, said)

    def _prepare(self, ctx: RequestContext) -> None:
        """Whether it streams (and usage asked of the engine for it), its prefix chain, and its usage record begun."""
        payload, spec = ctx.payload, ctx.spec
        ctx.stream = stream = bool(payload.get("stream"))
        if stream and ctx.request.path in USAGE_ASKED:
            options = payload.get("stream_options")
            if not (isinstance(options, dict) and options.get("include_usage") is True):  # "false" is false there
                # usage is recorded for every request: ask the engine for it, and keep that chunk from a client
                # that did not ask
                payload["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
                ctx.body = json.dumps(payload).encode()
                ctx.strip_usage = True
        if spec.routing == "prefix":  # hashed only when the model's policy looks at it: it costs CPU on every request
            ctx.blocks = chain(spec.name, prompt_text(payload, self.cfg.prefix_max_chars), self.cfg.prefix_block_chars)
        clock = self.state.clock
        ctx.t0, ctx.now = clock.monotonic(), clock.now()
        ctx.rec = Usage(new_usage_id(), ctx.key.id, ctx.m.model, "", 0, 0, ctx.now, 0.0, UNKNOWN)  # an adapter's own
        self.usage_journal.begin(ctx.rec)  # journaled before anything is sent: a crash from here on still records it

    def _sent(self, ctx: RequestContext, route: Route) -> None:
        ctx.tried.add(route.replica_id)
        if ctx.rec is not None:
            ctx.rec.replica_id = route.replica_id  # where it runs, should it run long (long_marks.py)
        route.outstanding += 1
        # busy from now on, not from its end: a long generation must not look idle to eviction meanwhile
        self.state.used(route.replica_id, ctx.now, route.outstanding)
        ctx.reached = True  # it may reach the engine from here on (a connection refused takes it back)
        if ctx.stream:
            ctx.watch = StreamUsage(strip=ctx.strip_usage, now=self.state.clock.monotonic, limit=ctx.cost)

    def _opening(self, ctx: RequestContext, route: Route) -> MessageStart | None:
        """For a streamed Messages request: what gives its stream a message_start where the engine's has none."""
        if not ctx.stream or ctx.request.path != MESSAGES:
            return None
        session, url, body = self._session(), route.url(MESSAGES + "/count_tokens"), ctx.body
        headers = engine_headers(False, route.secret)
        return MessageStart(ctx.spec.name, lambda: count_input_tokens(session, url, body, headers))

    def _returned(self, ctx: RequestContext, route: Route) -> None:
        route.outstanding -= 1
        # the wall clock's reading without a second read of it (SystemClock.now takes a lock)
        self.state.used(route.replica_id, ctx.now + (self.state.clock.monotonic() - ctx.t0), route.outstanding)

    def _unreachable(self) -> web.Response:
        """No replica left to try: nothing was sent (the end stage, ending.py, records nothing for it)."""
        return openai_error(503, "no ready replica could be reached", "service_unavailable", "no_reachable_replica",
                            headers={"Retry-After": str(RETRY_AFTER_S)})

    def _answer(self, ctx: RequestContext, route: Route, said: dict[str, str]) -> web.StreamResponse:
        """The answer to relay, once the replica is judged by it."""
        outcome, path = ctx.outcome, ctx.request.path
        assert outcome is not None and outcome.response is not None
        self._judge(route, outcome.status if not outcome.about_request else 400, path)
        if outcome.status in NOT_SERVED and not outcome.about_request and not outcome.response.prepared:
            # the engine has no such endpoint: the client's mistake for this model (4xx, which the official
            # clients do not retry), not the engine's 5xx
            outcome.response = unsupported(ctx.spec.name, path, f"its engine answered {outcome.status}")
        if not outcome.response.prepared and not all(h in outcome.response.headers for h in said):
            outcome.response.headers.update(said)  # an error envelope says where it was routed too
        return outcome.response

    def _said(self, rate: dict[str, str], decision: RouteDecision, route: Route, blocks: int) -> dict[str, str]:
        """The answer's own headers: the key's x-ratelimit-*, and how it was routed only where the operator asked
        (router.expose_routing); a match count would tell a client whether another tenant sent its prompt."""
        if not self.cfg.expose_routing and not log.isEnabledFor(logging.DEBUG):
            return rate
        how = f"{decision.reason}; replica={route.replica_id}; matched={decision.matched_blocks}/{blocks}"
        if self.cfg.expose_routing:
            return {**rate, "X-Llmgw-Route": how, "X-Llmgw-Worker": self.worker}
        log.debug("routed: %s; worker=%s", how, self.worker)
        return rate

    def _judge(self, route: Route, status: int, path: str) -> None:
        """Outlier ejection (table.py): the engine's own failures count, a client's mistakes and leaving do not,
        nor an endpoint the engine does not have (its 501 included): that is remembered instead."""
        if status in NOT_SERVED:
            if route.not_served(path, status, self.state.clock.monotonic()):  # once per UNSERVED_S: then not sent
                log.info("replica %s does not serve %s (it answered %d): such requests are answered without it for "
                         "%.0fs", route.replica_id, path, status, UNSERVED_S)
        elif status >= 500:
            length = route.failed(self.state.clock.monotonic())
            if length:
                words = (f"ejected from routing for {length:.0f}s after {EJECT_AFTER} failed requests in a row "
                         f"(the last: {status})")
                log.warning("replica %s %s", route.replica_id, words)
                self.state.ejected(route.replica_id, words)
        elif status != CLIENT_CLOSED:
            route.served()

    def engines(self) -> aiohttp.ClientSession:
        """The session requests reach engines through (its pools per replica): for what else the router asks them."""
        return self._session()

    def _session(self) -> aiohttp.ClientSession:
        if self.session is None:
            # a bounded pool per replica (per endpoint): beyond it requests queue in the router, not on the engine
            # idle connections are dropped before the engines drop them (llama-server's cpp-httplib and vLLM's
            # uvicorn after 5 s): a request written into a connection the engine is closing fails with "Can not
            # write request body", and is not retried since the engine may have had it
            connector = aiohttp.TCPConnector(limit=0, limit_per_host=self.cfg.connections_per_replica,
                                             keepalive_timeout=ENGINE_KEEPALIVE_S)
            # (no trace hooks: aiohttp's cost 10-20% of the router's throughput with one installed, measured)
            self.session = aiohttp.ClientSession(connector=connector, auto_decompress=False)
        return self.session

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
