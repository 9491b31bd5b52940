"""What /v1/models says of each model beyond its name: the context length its engine serves, which clients read to
size prompts (LiteLLM, IDE agents, guidellm). Learned from a ready replica's own /v1/models, once per replica:
vLLM and SGLang say `max_model_len` on each entry, llama-server `meta.n_ctx` (the context of one of its slots, what
one request may hold). Asked when a listing wants it and it is not known yet, within LEARN_WITHIN_S; an engine that
did not say is asked again after RETRY_S. Answered under vLLM's field name, which clients already read, and the
plainer `context_length`."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterable

import aiohttp

from llmgw.core.clock import Clock
from llmgw.router.proxy import engine_headers
from llmgw.router.table import Route

CONTEXT_FIELDS = (("max_model_len",), ("meta", "n_ctx"))  # vLLM and SGLang; llama-server
LEARN_WITHIN_S = 2.0  # a listing waits no longer than this for the engines it asks
RETRY_S = 60.0
MAX_READ = 256 * 1024
MAX_REPLICAS = 100_000


def context_of(body: bytes) -> int | None:
    """The context length an engine's /v1/models answer says, from its first entry that says one."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    entries = doc.get("data") if isinstance(doc, dict) else None
    for entry in entries if isinstance(entries, list) else ():
        for path in CONTEXT_FIELDS:
            v: object = entry
            for part in path:
                v = v.get(part) if isinstance(v, dict) else None
            if isinstance(v, int) and not isinstance(v, bool) and 0 < v < 2**31:
                return v
    return None


class ModelFacts:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._context: dict[str, int] = {}  # replica id -> what its engine said
        self._asked: dict[str, float] = {}  # replica id -> when its engine last failed to say (monotonic)

    def context(self, routes: Iterable[Route]) -> int | None:
        """What the model's replicas said (the least, should they differ: what every one of them takes)."""
        said = [self._context[r.replica_id] for r in routes if r.replica_id in self._context]
        return min(said) if said else None

    async def learn(self, session: aiohttp.ClientSession, models: Iterable[list[Route]]) -> None:
        """Ask one ready replica of each model whose context is not known, all at once, for LEARN_WITHIN_S."""
        now = self._clock.monotonic()
        ask = []
        for routes in models:
            if not routes or self.context(routes) is not None:
                continue
            route = next((r for r in routes if now - self._asked.get(r.replica_id, -RETRY_S) >= RETRY_S), None)
            if route is not None:
                self._asked[route.replica_id] = now
                ask.append(self._ask(session, route))
        if ask:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*ask), LEARN_WITHIN_S)
        if len(self._asked) > MAX_REPLICAS or len(self._context) > MAX_REPLICAS:  # replicas come and go: start over
            self._asked, self._context = {}, {}

    async def _ask(self, session: aiohttp.ClientSession, route: Route) -> None:
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with session.get(route.url("/v1/models"), headers=engine_headers(False, route.secret),
                                   timeout=aiohttp.ClientTimeout(total=LEARN_WITHIN_S), allow_redirects=False) as r:
                if r.status != 200:
                    return
                body = b""
                while chunk := await r.content.read(65536):
                    body += chunk
                    if len(body) > MAX_READ:
                        return
                n = context_of(body)
                if n is not None:
                    self._context[route.replica_id] = n
                    self._asked.pop(route.replica_id, None)
