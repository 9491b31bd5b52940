"""One proxied request as it passes the router's stages (authenticate, admit, choose, forward with retry, end):
what admission let through, and what the later stages learn on the way."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from llmgw.config.adapters import ServedAdapter
from llmgw.config.server import ModelSpec
from llmgw.router.proxy import Outcome
from llmgw.router.stats import Measure
from llmgw.router.table import Route
from llmgw.router.usage import StreamUsage
from llmgw.store.base import ApiKeyRecord, Usage


@dataclass(slots=True)
class RequestContext:
    request: web.Request
    m: Measure  # what the recorder counts of it
    key: ApiKeyRecord
    spec: ModelSpec
    payload: dict[str, Any]
    body: bytes  # what is sent to the engine
    rate: dict[str, str] = field(default_factory=dict)  # the key's x-ratelimit-* headers, answered with it
    ticket: str = ""  # the admission to settle when it ends ("": none)
    cost: int = 0  # tokens reserved (0: none): a stream is cut there, and the request recorded at most at it
    reached: bool = False  # it may have reached an engine: settled at what it used, not at nothing
    served: ServedAdapter | None = None  # the LoRA adapter of `spec` asked for (router/adapters.py), if any
    # set when it is forwarded
    stream: bool = False
    strip_usage: bool = False  # usage was asked of the engine for the router's sake: kept from the client
    blocks: list[bytes] = field(default_factory=list)  # the prompt's prefix chain (only under the prefix policy)
    tried: set[str] = field(default_factory=set)  # replicas it was sent towards
    route: Route | None = None
    watch: StreamUsage | None = None
    outcome: Outcome | None = None
    # a stream's answer begun while it waited for its model (keep-alive comments sent): relayed into, or ended with
    # the error event of what would have been answered (router/waiting.py)
    early: web.StreamResponse | None = None
    kept_alive: float = 0.0  # when its last keep-alive comment was sent (the injected clock's monotonic seconds)
    rec: Usage | None = None  # its usage record, journaled from before it is sent until it is finished
    t0: float = 0.0  # monotonic seconds when forwarding began
    now: float = 0.0  # the wall clock then
