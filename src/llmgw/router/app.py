"""The OpenAI-compatible API served on api_listen: each proxied request passes authenticate (auth.py), admit
(intake.py, limits.py), choose (waiting.py, choice.py), forward with retry (dispatch.py) and end (ending.py), over
one RequestContext (context.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from pathlib import Path

from aiohttp import web

from llmgw.config.adapters import ServedAdapter
from llmgw.config.server import RouterConfig
from llmgw.router.adapters import AdapterIndex, lora_unread, rewritten
from llmgw.router.auth import Authenticator
from llmgw.router.choice import Chooser
from llmgw.router.context import RequestContext
from llmgw.router.dispatch import Dispatcher
from llmgw.router.ending import RequestEnd
from llmgw.router.errors import MESSAGES, as_anthropic, openai_envelope, openai_error, unsupported
from llmgw.router.intake import payload_of, spec_of
from llmgw.router.keys import KeyRing
from llmgw.router.limits import Unreservable, refused, reserve
from llmgw.router.long_marks import LongMarks
from llmgw.router.model_facts import ModelFacts
from llmgw.router.own_usage import OwnUsage
from llmgw.router.proxy import CLIENT_CLOSED
from llmgw.router.state import RouterState
from llmgw.router.stats import Measure, Recorder
from llmgw.router.table import RoutingTable
from llmgw.router.uploads import BodyBudget, KeyUploads, bodies_full, too_many_uploads
from llmgw.router.usage_journal import UsageJournal
from llmgw.router.waiting import ReadyWait
from llmgw.store.base import ApiKeyRecord

# proxied to the engine as they are, routed by their "model" field: OpenAI's, its Responses API, Anthropic's Messages
PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses", "/v1/messages",
         "/v1/messages/count_tokens")
NO_RATE: dict[str, str] = {}  # the headers of a key without limits (never changed: only copied into an answer's)


def model_object(name: str, context: int | None, parent: str | None = None) -> dict[str, object]:
    """A model as /v1/models lists it (an adapter: a model whose parent is its base, as vLLM's own listing says),
    with the context length its engines serve where they said (model_facts.py)."""
    out: dict[str, object] = {"id": name, "object": "model", "created": 0, "owned_by": "llmgw"}
    if parent is not None:
        out["parent"] = parent
    if context is not None:
        out["max_model_len"] = out["context_length"] = context
    return out


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
        currency: str = "USD",
        long_after: float | None = None,
    ) -> None:
        self.state = state
        self.keys = keys
        self.cfg = cfg
        self.load_wait = load_wait
        self.max_body = max_body
        self.usage_journal = UsageJournal(state.store_usage, journal_dir, adopt=adopt)
        self.recorder = Recorder()
        state.attach(self.recorder)
        self.table = RoutingTable()
        self.auth = Authenticator(state, keys, cfg.auth, state.clock)
        self.ready = ReadyWait(state, self.table, cfg, load_wait)
        self.waiting = self.ready.waiting  # per model, requests waiting for a replica to become ready
        if long_after is not None:  # requests in flight this long, and waits for loads, marked for chargeback
            self.usage_journal.marks = marks = LongMarks(state.clock.now, long_after)
            self.ready.on_waited = lambda *wait: self.usage_journal.pending.append(marks.waited(*wait))
        self.worker = str(os.getpid())  # which API worker answered, for operators chasing one bad process
        self.dispatch = Dispatcher(state, self.table, Chooser(state, self.table, cfg), self.usage_journal, cfg,
                                   self.worker)
        self.ending = RequestEnd(self.usage_journal, state, self.recorder, state.clock)
        self.uploads = KeyUploads(cfg.key_uploads)  # bodies arriving, per key: no more at once than its concurrency
        self.bodies = BodyBudget(cfg.body_budget, max_body)  # bytes of bodies held, from before each is read
        self.adapters = AdapterIndex()
        self.facts = ModelFacts(state.clock)  # what /v1/models says of each model: its engines' context length
        self.own_usage = OwnUsage(keys.store, state.clock, currency)  # GET /v1/usage: a key's own, with that key

    def refresh(self) -> None:
        """The routing table follows the control plane's replicas; keys changed elsewhere are read again, in the
        background (the server calls this after each pass: a revocation followed is read before a request asks)."""
        self.ready.refresh()
        if self.auth.required:
            self.auth.catch_up()

    async def _auth(self, request: web.Request) -> ApiKeyRecord | web.Response:
        current = not self.auth.required or await self.auth.current()
        self.ready.refresh()
        return self.auth.check(request, current)

    async def models(self, request: web.Request) -> web.Response:
        key = await self._auth(request)
        if isinstance(key, web.Response):
            return key
        models = [m for m in self.state.models.values()
                  if m.scaling.max > 0 and (not key.models or m.name in key.models)]
        adapters = [s for s in self.adapters.listed(self.state.models, self.state.generation())
                    if s.base.scaling.max > 0 and (not key.models or s.adapter.name in key.models)]
        routes = self.table.routes
        await self.facts.learn(self.dispatch.engines(), [routes.get(m, []) for m in
                                                         {*(m.name for m in models), *(s.base.name for s in adapters)}])
        data = [model_object(m.name, self.facts.context(routes.get(m.name, []))) for m in models]
        data += [model_object(s.adapter.name, self.facts.context(routes.get(s.base.name, [])), s.base.name)
                 for s in adapters]
        return web.json_response({"object": "list", "data": data})

    async def model(self, request: web.Request) -> web.Response:
        """GET /v1/models/{id}: the official clients' models.retrieve. A model this key may not use, or one that is
        switched off, is not found, as in the list."""
        key = await self._auth(request)
        if isinstance(key, web.Response):
            return key
        name = request.match_info["id"]
        served = self.adapters.find(name, self.state.models, self.state.generation())
        m = self.state.models.get(name) or (served.base if served is not None else None)
        if m is None or m.scaling.max == 0 or (key.models and name not in key.models):
            return openai_error(404, f"the model '{name}' does not exist", "invalid_request_error",
                                "model_not_found", "model")
        routes = self.table.routes.get(m.name, [])
        await self.facts.learn(self.dispatch.engines(), [routes])
        if served is not None and m.name != name:
            return web.json_response(model_object(name, self.facts.context(routes), m.name))
        return web.json_response(model_object(m.name, self.facts.context(routes)))

    async def proxy(self, request: web.Request) -> web.StreamResponse:
        """One request through the stages, in order: authenticate and admit (_admit), refused while the routing
        table is in doubt (_unroutable), a wait for a ready replica (waiting.py), choose and forward with retry
        (dispatch.py), and its end (ending.py: usage, limits, statistics), once however it ended."""
        m = Measure(start=self.state.clock.monotonic())
        ctx: RequestContext | None = None
        status = 500  # an exception: openai_envelope answers it 500
        try:
            # authenticate and admit in a coroutine of their own, which ends before anything is sent: the one
            # awaiting the engine is the dispatcher's, right under this one (every level between the loop and a
            # waiting request is passed through again each time it resumes)
            admitted = await self._admit(request, m)
            if isinstance(admitted, web.StreamResponse):
                resp = admitted
            else:
                ctx = admitted
                refusal: web.StreamResponse | None = self._unroutable(ctx)
                if refusal is None and self.table.pick(ctx.spec.name) is None:
                    refusal = await self.ready.until_ready(ctx)
                resp = refusal if refusal is not None else await self.dispatch.serve(ctx)
                if ctx.early is not None and resp is not ctx.early:  # begun while it waited: ended with an event
                    status = resp.status
                    return await as_event(ctx.early, resp, ctx.request.path.startswith(MESSAGES))
            status = resp.status
            return resp
        except (asyncio.CancelledError, ConnectionError):  # the client went away (its body cut off, say)
            status = CLIENT_CLOSED
            raise
        finally:
            self.bodies.give(m.body_held)
            self.ending.end(m, ctx, status)

    async def _admit(self, request: web.Request, m: Measure) -> web.StreamResponse | RequestContext:
        """The answer when the request is refused here (its key, body, model, limits); else what to serve."""
        key = await self._auth(request)
        if isinstance(key, web.Response):
            return key
        if request.content_length is not None and request.content_length > self.max_body:
            return self._too_large()
        lim = key.limits if key.limits is not None else self.cfg.default_limits
        if not self.uploads.take(key.id, lim.concurrency):
            return too_many_uploads(lim.concurrency, self.cfg.key_uploads)
        counted = self.bodies.counted(request)
        if not self.bodies.take(counted):
            self.uploads.give(key.id)
            return bodies_full(self.bodies)
        m.body_held = counted  # given back when the request ends, whatever the body became
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._too_large()
        finally:
            self.uploads.give(key.id)
        # read: the budget holds what the body is, not what it might have been (a chunked one counted at max_body)
        self.bodies.give(counted - len(body))
        m.body_held = len(body)
        payload = payload_of(body)
        if isinstance(payload, web.Response):
            return payload
        spec = spec_of(payload, self.state.models, key, m, self._adapter)
        if isinstance(spec, web.Response):
            return spec
        if lora_unread(spec, request.path):  # it would apply adapters this request did not ask for
            return unsupported(m.model, request.path, "its engine would not be told which LoRA adapter to apply")
        served = self._adapter(m.model) if m.model != spec.name else None
        body = rewritten(payload, body, spec, served)
        if not lim.any():
            return RequestContext(request, m, key, spec, payload, body, NO_RATE, served=served)
        try:
            body, cost = reserve(request.path, payload, body, self.cfg.reserve_max_tokens,
                                 media_tokens=self.cfg.reserve_media_tokens)
        except Unreservable as e:
            return openai_error(400, str(e), "invalid_request_error", "invalid_value")
        admitted = await self.state.admit(key, cost, spec.name)
        if not admitted.admitted:  # refused here: it reaches no engine and costs nothing
            resp = refused(admitted)
            if self.cfg.expose_routing:
                resp.headers["X-Llmgw-Worker"] = self.worker
            return resp
        return RequestContext(request, m, key, spec, payload, body, dict(admitted.headers), admitted.ticket, cost,
                              served=served)

    def _adapter(self, name: str) -> ServedAdapter | None:
        return self.adapters.find(name, self.state.models, self.state.generation())

    def _unroutable(self, ctx: RequestContext) -> web.Response | None:
        """Counted in flight from here on; refused while the routing table has gone unconfirmed too long."""
        ctx.m.key_id = ctx.key.id  # with recorder.begin: the end is counted only for a request begun
        self.recorder.begin(ctx.key.id, ctx.m.model)  # the adapter's name for an adapter (as its end is counted)
        stale = self.state.stale_for()
        if stale > self.cfg.serve_stale_for:
            return openai_error(503, f"this server has not been able to confirm where models run for {stale:.0f}s "
                                f"(its store or control plane unreachable; it serves from what it knew for "
                                f"{self.cfg.serve_stale_for:.0f}s at most)", "service_unavailable",
                                "routing_table_stale")
        return None

    def _too_large(self) -> web.Response:
        return openai_error(413, f"request body over {self.max_body} bytes", "invalid_request_error", "body_too_large")

    async def flush_usage(self) -> None:
        """Usage to the store, and demand and use to the control plane, every flush interval."""

        async def activity() -> None:
            while True:
                await asyncio.sleep(self.cfg.usage_flush_interval)
                await self.state.flush()

        await asyncio.gather(self.usage_journal.run(self.cfg.usage_flush_interval), activity())

    async def close(self) -> None:
        self.auth.close()
        await self.usage_journal.close()
        await self.state.flush()
        await self.dispatch.close()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.max_body, middlewares=[openai_envelope])
        for p in PATHS:  # first: the router's resolver tries routes in the order they were added
            app.router.add_post(p, self.proxy)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/v1/models/{id:.+}", self.model)
        app.router.add_get("/v1/usage", self.usage)
        app.router.add_get("/health", self.health)
        return app

    async def health(self, request: web.Request) -> web.Response:
        """What load tools and clients probe before they send anything (guidellm refuses to run without it), as
        engines answer it: ok while this router can route, 503 once its routing table has gone unconfirmed past
        router.serve_stale_for (when it refuses requests too). No key needed; nothing but that is said."""
        if self.state.stale_for() > self.cfg.serve_stale_for:
            return web.json_response({"status": "unavailable", "reason": "routing_table_stale"}, status=503)
        return web.json_response({"status": "ok"})

    async def usage(self, request: web.Request) -> web.Response:
        key = await self._auth(request)
        if isinstance(key, web.Response):
            return key
        return await self.own_usage.answer(request, key.id)



async def as_event(early: web.StreamResponse, resp: web.StreamResponse, anthropic: bool = False
                   ) -> web.StreamResponse:
    """A stream begun while it waited for its model, ended with what would have been answered instead (a refusal,
    an engine's error): its body as the stream's last event, as an error mid-stream is sent; on Anthropic's path
    in Anthropic's envelope and as its `error` event, which its clients raise."""
    body = resp.body if isinstance(resp, web.Response) and isinstance(resp.body, bytes) else b""
    if not body.startswith(b"{"):
        body = json.dumps({"error": {"message": f"answered {resp.status} while the stream waited", "type":
                                     "upstream_error", "param": None, "code": "upstream_error"}}).encode()
    event = b""
    if anthropic and isinstance(resp, web.Response):
        resp.body = body
        as_anthropic(resp)  # rewrites its body in place
        converted = resp.body
        body, event = (converted if isinstance(converted, bytes) else body), b"event: error\n"
    with contextlib.suppress(ConnectionError, RuntimeError):  # the client gone meanwhile: nothing to tell
        await early.write(event + b"data: " + body + b"\n\n")
        await early.write_eof()
    return early
