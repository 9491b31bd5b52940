"""The OpenAI-compatible API served on api_listen."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections import Counter
from pathlib import Path
from typing import Any, NamedTuple

import aiohttp
from aiohttp import web

from llmgw.config.server import ModelSpec, RouterConfig
from llmgw.core.errors import ConnectFailed, StoreError, StreamBroken
from llmgw.router.admission import Unreservable, bounded, refused, reserve, used_of
from llmgw.router.errors import openai_envelope, openai_error, unsupported
from llmgw.router.keys import KeyRing
from llmgw.router.ledger import UNKNOWN, UsageLedger
from llmgw.router.prefix import PrefixIndex, chain, prompt_text
from llmgw.router.proxy import CLIENT_CLOSED, NOT_SERVED, Outcome, Timeouts, broken, forward
from llmgw.router.scoring import LEAST_LOADED, PREFIX, Candidate, Decision, RouteReason, Weights, choose
from llmgw.router.state import RouterState
from llmgw.router.stats import OTHER, Measure, Recorder
from llmgw.router.table import EJECT_AFTER, UNSERVED_S, Route, RoutingTable
from llmgw.router.uploads import Uploads, too_many_uploads
from llmgw.router.usage import StreamUsage
from llmgw.store.base import ApiKeyRecord, Usage, new_usage_id
from llmgw.wire.router import model_explanation_lines

log = logging.getLogger(__name__)

# proxied to the engine as they are, routed by their "model" field: OpenAI's, its Responses API, Anthropic's Messages
PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses", "/v1/messages")
# OpenAI's streams that carry usage only when asked (stream_options); the Responses and Messages APIs' streams always
# do, in events a client needs (response.completed, message_start, message_delta), which must never be kept from it
USAGE_ASKED = ("/v1/chat/completions", "/v1/completions")
RETRY_AFTER_S = 10
HOME_BLOCKS = 16  # leading blocks that name a prompt's home replica, for ties
WAIT_POLL_S = 0.5  # real seconds between looks at the table while a load is awaited
REAL_WAIT_CAP = 20.0  # and never more than this many load_waits of real time, whatever the injected clock says
ANONYMOUS = ApiKeyRecord(id="-", name="anonymous", prefix="", hash="", created_at=0.0)


ENGINE_KEEPALIVE_S = 4.0  # under the 5 s after which the engines close an idle connection

class Admitted(NamedTuple):
    """A request let through to be served: its key's x-ratelimit-* headers, and its admission's ticket and
    reservation to settle when it ends ("": none)."""

    key: ApiKeyRecord
    spec: ModelSpec
    payload: dict[str, Any]
    body: bytes
    rate: dict[str, str] = {}  # noqa: RUF012  (never changed: _serve copies it into its headers)
    ticket: str = ""
    cost: int = 0


class Router:
    def __init__(
        self,
        state: RouterState,
        keys: KeyRing,
        cfg: RouterConfig,
        load_wait: float,
        max_body: int,
        journal_dir: Path | None = None,
        adopt: bool = False,
    ) -> None:
        self.state = state
        self.ledger = UsageLedger(state.store_usage, journal_dir, adopt=adopt)
        self.recorder = Recorder()
        state.attach(self.recorder)
        self.prefixes = PrefixIndex(cfg.prefix_entries)
        self._alone: dict[str, Decision] = {}  # the decision for a replica alone in rotation (made once: frozen)
        self.waiting: Counter[str] = Counter()  # per model, requests waiting for a replica to become ready
        self._hung: tuple[int, dict[str, str]] = (-1, {})  # (generation, models whose every replica stopped answering)
        self.keys = keys
        self.cfg = cfg
        self.load_wait = load_wait
        self.max_body = max_body
        self.table = RoutingTable()
        self._keys_version = -1
        self._worker = str(os.getpid())  # which API worker answered, for operators chasing one bad process
        self.timeouts = Timeouts(cfg.connect_timeout, cfg.first_byte_timeout, cfg.idle_timeout, cfg.queue_timeout)
        self.session: aiohttp.ClientSession | None = None
        self.changed = asyncio.Event()
        self._keys_lock = asyncio.Lock()
        self.uploads = Uploads()  # bodies arriving, per key: no more at once than its concurrency

    # routing table follows the control plane's replicas
    def refresh(self) -> None:
        generation = self.state.generation()
        if self.table.generation == generation:
            return
        self.table.update(generation, self.state.ready())
        self.changed.set()
        self.changed = asyncio.Event()

    async def _keys_current(self) -> None:
        """Keys are read again when the control plane says they changed, off the event loop (a store read can
        stall on a busy disk), once however many requests notice at the same moment."""
        async with self._keys_lock:
            version = self.state.keys_version()  # again: a reload done while this waited may be recent enough
            if version != self._keys_version:
                await asyncio.to_thread(self.keys.reload)
                self._keys_version = version

    async def _auth(self, request: web.Request) -> ApiKeyRecord | web.Response:
        try:
            if self.state.keys_version() != self._keys_version:  # the common case costs no coroutine
                await self._keys_current()
        except StoreError as e:  # keys changed (one revoked, say) and cannot be read: no key is trusted meanwhile
            log.warning("API keys changed and cannot be read again: %s", e)
            return openai_error(503, "API keys cannot be checked now: the store is unreachable; try again shortly",
                                "server_error", "store_unavailable", headers={"Retry-After": str(RETRY_AFTER_S)})
        self.refresh()
        if not self.cfg.auth:
            return ANONYMOUS
        raw = presented_key(request)
        if raw is None:
            return openai_error(401, "missing API key: send 'Authorization: Bearer <key>' (or 'x-api-key: <key>')",
                                "invalid_request_error", "missing_api_key")
        key = self.keys.check(raw)
        if key is None:
            return openai_error(401, "invalid or revoked API key", "invalid_request_error", "invalid_api_key")
        return key

    async def models(self, request: web.Request) -> web.Response:
        key = await self._auth(request)
        if isinstance(key, web.Response):
            return key
        data = [
            {"id": m.name, "object": "model", "created": 0, "owned_by": "llmgw"}
            for m in self.state.models.values()
            if m.scaling.max > 0 and (not key.models or m.name in key.models)
        ]
        return web.json_response({"object": "list", "data": data})

    async def model(self, request: web.Request) -> web.Response:
        """GET /v1/models/{id}: the official clients' models.retrieve. A model this key may not use, or one that is
        switched off, is not found, as in the list."""
        key = await self._auth(request)
        if isinstance(key, web.Response):
            return key
        name = request.match_info["id"]
        m = self.state.models.get(name)
        if m is None or m.scaling.max == 0 or (key.models and name not in key.models):
            return openai_error(404, f"the model '{name}' does not exist", "invalid_request_error",
                                "model_not_found", "model")
        return web.json_response({"id": m.name, "object": "model", "created": 0, "owned_by": "llmgw"})

    def _not_answering(self, model: str) -> str | None:
        """Why every replica of the model is unresponsive (none ready, none loading); None when not so. Asked of the
        control plane's view once per generation of it."""
        generation = self.state.generation()
        if self._hung[0] != generation:
            self._hung = (generation, self.state.not_answering())
        return self._hung[1].get(model)

    async def _wait_ready(self, model: str, request: web.Request) -> bool | None:
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

    async def proxy(self, request: web.Request) -> web.StreamResponse:
        """Serve one request, and count it: per model, by the status it is recorded with, with its timings."""
        clock = self.state.clock
        m = Measure(start=clock.monotonic())
        status = 500  # an exception: openai_envelope answers it 500
        try:
            # admitted in a coroutine of its own, which ends before anything is sent: the one awaiting the engine
            # is _serve, right under this one (every level between the loop and a waiting request is passed
            # through again each time it resumes)
            got = await self._admit(request, m)
            if isinstance(got, web.StreamResponse):
                resp = got
            else:
                reached: list[bool] = []
                try:
                    resp = await self._serve(request, m, got.key, got.spec, got.payload, got.body, got.rate, reached,
                                             got.cost)
                finally:
                    if got.ticket:
                        self.state.settle(got.ticket, used_of(m, bool(reached), got.cost))
            status = resp.status
            return resp
        except (asyncio.CancelledError, ConnectionError):  # the client went away (its body cut off, say)
            status = CLIENT_CLOSED
            raise
        finally:
            if m.key_id:
                self.recorder.end(m.key_id, m.model)
            self.recorder.finish(m, status, clock.monotonic())

    async def _admit(self, request: web.Request, m: Measure) -> web.StreamResponse | Admitted:
        """The answer when the request is refused here (its key, body, model, limits); else what to serve."""
        key = await self._auth(request)
        if isinstance(key, web.Response):
            return key
        if request.content_length is not None and request.content_length > self.max_body:
            return self._too_large()
        lim = key.limits if key.limits is not None else self.cfg.default_limits
        if not self.uploads.take(key.id, lim.concurrency):
            return too_many_uploads(lim.concurrency)
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._too_large()
        finally:
            self.uploads.give(key.id)
        try:
            payload = json.loads(body)
        except ValueError as e:
            return openai_error(400, f"request body is not valid JSON: {e}", "invalid_request_error", "invalid_json")
        except RecursionError:
            return openai_error(400, "request body is nested too deeply", "invalid_request_error", "invalid_json")
        if not isinstance(payload, dict):
            return openai_error(400, "request body must be a JSON object", "invalid_request_error", "invalid_json")
        model = payload.get("model")
        if not isinstance(model, str) or not model:
            return openai_error(400, "'model' is required", "invalid_request_error", "missing_model", "model")
        spec = self.state.models.get(model)
        if spec is None:
            m.model = OTHER
            return openai_error(
                404, f"the model '{model}' does not exist", "invalid_request_error", "model_not_found", "model"
            )
        m.model = model
        if key.models and model not in key.models:
            return openai_error(
                403, f"this API key may not use '{model}'", "invalid_request_error", "model_not_allowed", "model"
            )
        if spec.scaling.max == 0:
            return openai_error(
                503,
                f"the model '{model}' is configured but switched off (scaling max 0)",
                "service_unavailable",
                "model_off",
            )
        if not lim.any():
            return Admitted(key, spec, payload, body)
        try:
            body, cost = reserve(request.path, payload, body, self.cfg.reserve_max_tokens,
                                 media_tokens=self.cfg.reserve_media_tokens)
        except Unreservable as e:
            return openai_error(400, str(e), "invalid_request_error", "invalid_value")
        admitted = await self.state.admit(key, cost)
        if not admitted.admitted:  # refused here: it reaches no engine and costs nothing
            resp = refused(admitted)
            if self.cfg.expose_routing:
                resp.headers["X-Llmgw-Worker"] = self._worker
            return resp
        return Admitted(key, spec, payload, body, dict(admitted.headers), admitted.ticket, cost)

    async def _serve(self, request: web.Request, m: Measure, key: ApiKeyRecord, spec: ModelSpec,
                     payload: dict[str, Any], body: bytes, rate: dict[str, str],
                     reached: list[bool], cost: int = 0) -> web.StreamResponse:
        """Wait for a replica if need be, and forward. `rate`: the key's x-ratelimit-* headers, answered with it;
        `reached` gets an entry once the request is sent to an engine; `cost`: the tokens it reserved (0: none), which
        a stream is cut at and the request is recorded at most at."""
        model = spec.name
        m.key_id = key.id  # with recorder.begin: the end is counted only for a request begun
        self.recorder.begin(key.id, model)
        stale = self.state.stale_for()
        if stale > self.cfg.serve_stale_for:
            return openai_error(503, f"this server has not been able to confirm where models run for {stale:.0f}s "
                                f"(its store or control plane unreachable; it serves from what it knew for "
                                f"{self.cfg.serve_stale_for:.0f}s at most)", "service_unavailable",
                                "routing_table_stale")
        if self.table.pick(model) is None:
            hung = self._not_answering(model)
            if hung is not None:  # nothing is loading: waiting out load_wait would only hold the client
                return openai_error(503, f"no replica of {model} is answering: {hung}", "service_unavailable",
                                    "model_not_answering", headers={"Retry-After": str(RETRY_AFTER_S)})
            if spec.on_demand:
                self.state.want(model)
            if self.waiting[model] >= self.cfg.max_waiting:
                return openai_error(
                    429, f"too many requests waiting for {model} to load ({self.waiting[model]}): try again shortly",
                    "rate_limit_exceeded", "too_many_waiting", headers={"Retry-After": str(RETRY_AFTER_S)})
            waited_from = self.state.clock.monotonic()
            self.waiting[model] += 1
            try:
                ready = await self._wait_ready(model, request)
            finally:
                self.waiting[model] -= 1
            m.queue_s += self.state.clock.monotonic() - waited_from
            if ready is None:  # nobody to answer: recorded as the client's leaving
                return web.Response(status=CLIENT_CLOSED)
            if not ready:
                # model_loading only for a load on demand; a model that should be serving and has no ready replica
                # (a dead worker, a failed placement) says so, with the control plane's explanation
                why, code = ("the model is loading", "model_loading") if spec.on_demand else (
                    "no replica of the model is ready", "no_ready_replica")
                told = await self.state.explain(model)
                detail = "; ".join(model_explanation_lines(told)[:2]) if told is not None else ""
                return openai_error(
                    503,
                    f"{why}: {detail}",
                    "service_unavailable",
                    code,
                    headers={"Retry-After": str(RETRY_AFTER_S)},
                )
        if self.table.unserved(model, request.path, self.state.clock.monotonic()):  # sent nowhere: it costs nothing
            return unsupported(model, request.path, "its engine said so")
        stream = bool(payload.get("stream"))
        strip_usage = False
        if stream and request.path in USAGE_ASKED:
            options = payload.get("stream_options")
            if not (isinstance(options, dict) and options.get("include_usage") is True):  # "false" is false there
                # usage is recorded for every request: ask the engine for it, and keep that chunk from a client
                # that did not ask
                payload["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
                body = json.dumps(payload).encode()
                strip_usage = True
        path = request.path
        tried: set[str] = set()
        # hashed only when the model's policy looks at it: it costs CPU on every request
        keys = chain(model, prompt_text(payload, self.cfg.prefix_max_chars), self.cfg.prefix_block_chars) \
            if spec.routing == "prefix" else []
        t0 = self.state.clock.monotonic()
        now = self.state.clock.now()
        begun = Usage(new_usage_id(), key.id, model, "", 0, 0, now, 0.0, UNKNOWN)
        self.ledger.begin(begun)  # journaled before anything is sent: a crash from here on still records it
        rec: Usage | None = begun
        outcome: Outcome | None = None
        route = None
        watch: StreamUsage | None = None
        try:
            while True:
                route, decision = self._choose(model, tried, keys, spec.routing, path)
                if route is None:
                    self.ledger.unsent(begun)
                    rec = None
                    return openai_error(
                        503,
                        "no ready replica could be reached",
                        "service_unavailable",
                        "no_reachable_replica",
                        headers={"Retry-After": str(RETRY_AFTER_S)},
                    )
                tried.add(route.replica_id)
                route.outstanding += 1
                # busy from now on, not from its end: a long generation must not look idle to eviction meanwhile
                self.state.used(route.replica_id, now, route.outstanding)
                reached[:] = [True]  # it may reach the engine from here on (a connection refused takes it back)
                watch = StreamUsage(strip=strip_usage, now=self.state.clock.monotonic, limit=cost) if stream else None
                try:
                    said = self._said(rate, decision, route, len(keys))
                    outcome = await forward(
                        request, self._session(), route.url(path), body, stream, self.timeouts, watch,
                        route.secret, m, said, route.closes_after_stream,
                    )
                except ConnectFailed as e:
                    reached.clear()  # nothing was sent
                    log.warning("replica %s not reached (%s); trying another", route.replica_id, e)
                    watch = None
                    continue  # nothing was sent: safe to try elsewhere
                except StreamBroken as e:
                    log.warning("replica %s: %s (not retried: it had the request)", route.replica_id, e)
                    outcome = broken(e)
                finally:
                    route.outstanding -= 1
                    # the wall clock's reading without a second read of it (SystemClock.now takes a lock)
                    self.state.used(route.replica_id, now + (self.state.clock.monotonic() - t0), route.outstanding)
                assert outcome.response is not None
                self._judge(route, outcome.status, path)
                if outcome.status in NOT_SERVED and not outcome.response.prepared:
                    # the engine has no such endpoint: the client's mistake for this model (4xx, which the official
                    # clients do not retry), not the engine's 5xx
                    outcome.response = unsupported(model, path, f"its engine answered {outcome.status}")
                if not outcome.response.prepared and not all(h in outcome.response.headers for h in said):
                    outcome.response.headers.update(said)  # an error envelope says where it was routed too
                return outcome.response
        finally:
            # every request that reached an engine is recorded once, however it ended: a client that went away
            # or an interrupted handler is CLIENT_CLOSED with what was seen
            if rec is not None:
                if outcome is not None:
                    status, p_tok, c_tok = outcome.status, outcome.prompt_tokens, outcome.completion_tokens
                else:  # interrupted (the handler cancelled): what the stream showed so far
                    status, (p_tok, c_tok) = CLIENT_CLOSED, (watch.so_far() if watch is not None else (0, 0))
                m.status, m.prompt_tokens, m.completion_tokens = status, p_tok, c_tok
                if watch is not None:
                    m.first_at, m.last_at, m.overrun = watch.first_at, watch.last_at, watch.over
                replica = route.replica_id if route is not None else ""
                bounded(m, cost, replica)
                self.ledger.finish(rec, replica, m.prompt_tokens, m.completion_tokens,
                                   self.state.clock.monotonic() - t0, status)

    def _said(self, rate: dict[str, str], decision: Decision, route: Route, blocks: int) -> dict[str, str]:
        """The answer's own headers: the key's x-ratelimit-*, and how it was routed only where the operator asked
        (router.expose_routing); a match count would tell a client whether another tenant sent its prompt."""
        if not self.cfg.expose_routing and not log.isEnabledFor(logging.DEBUG):
            return rate
        how = f"{decision.reason}; replica={route.replica_id}; matched={decision.matched_blocks}/{blocks}"
        if self.cfg.expose_routing:
            return {**rate, "X-Llmgw-Route": how, "X-Llmgw-Worker": self._worker}
        log.debug("routed: %s; worker=%s", how, self._worker)
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

    def _choose(self, model: str, tried: set[str], keys: list[bytes], policy: str,
                path: str) -> tuple[Route | None, Decision]:
        """Score the model's ready replicas not tried yet that may serve `path` (scoring.py) and remember the prefix
        for the chosen."""
        routes = self.table.in_rotation(model, tried, self.state.clock.monotonic(), path)
        if len(routes) == 1 and not keys:  # nothing to weigh: the one replica, as choose() would have it
            alone = self._alone.get(routes[0].replica_id)
            if alone is None:
                if len(self._alone) >= 1024:
                    self._alone.clear()
                alone = self._alone[routes[0].replica_id] = Decision(routes[0].replica_id, RouteReason.LeastLoaded,
                                                                     0, ())
            return routes[0], alone
        loads = self.state.loads()
        matched = self.prefixes.matches(keys) if keys else {}
        cands = []
        for r in routes:
            load = loads.get(r.replica_id)
            cands.append(Candidate(r.replica_id, r.outstanding, load.running if load else None,
                                   load.waiting if load else None, matched.get(r.replica_id, 0), r.slots))
        weights = Weights(load=1.0, prefix=PREFIX.prefix, margin=self.cfg.prefix_margin) \
            if policy == "prefix" else LEAST_LOADED
        # the prompt's first kilobyte or so names its home replica among equals (scoring.py)
        decision = choose(cands, len(keys), weights, keys[min(len(keys), HOME_BLOCKS) - 1] if keys else b"")
        route = next((r for r in routes if r.replica_id == decision.replica_id), None)
        if route is not None and keys:
            self.prefixes.record(keys, route.replica_id)
        return route, decision

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

    def _too_large(self) -> web.Response:
        return openai_error(413, f"request body over {self.max_body} bytes", "invalid_request_error", "body_too_large")

    async def flush_usage(self) -> None:
        """Usage to the store, and demand and use to the control plane, every flush interval."""

        async def activity() -> None:
            while True:
                await asyncio.sleep(self.cfg.usage_flush_interval)
                await self.state.flush()

        await asyncio.gather(self.ledger.run(self.cfg.usage_flush_interval), activity())

    async def close(self) -> None:
        await self.ledger.close()
        await self.state.flush()
        if self.session is not None:
            await self.session.close()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.max_body, middlewares=[openai_envelope])
        for p in PATHS:  # first: the router's resolver tries routes in the order they were added
            app.router.add_post(p, self.proxy)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/v1/models/{id:.+}", self.model)
        return app


def presented_key(request: web.Request) -> str | None:
    """The key a request presents: OpenAI's clients send `Authorization: Bearer`, Anthropic's `x-api-key` (the same
    keys, checked the same way, on every path). The bearer header wins where both are sent."""
    header = request.headers.get("Authorization", "")
    if header.startswith("Bearer "):
        return header[7:].strip()
    other = request.headers.get("x-api-key")
    return other.strip() if other is not None else None
