"""Bounds every llmgw listener puts on one request, whatever its application.

- A body is refused (413) on its announced length when that is over the application's limit, before a byte of it
  is read.
- A body must keep `BODY_MIN_RATE` over every window (the header timeout) until it is all in. A client that
  trickles its body in (slowloris) is answered 408 after one window below the rate, whatever length it announced,
  instead of holding a connection and a handler for minutes. Only a handler still waiting for the body is
  stopped: the rate does not apply to an answer being streamed. Bodies being received are listed (`Uploads`), so
  that a listener at its cap can close the slowest for a new connection.
- An answer given without reading the request's body (a refusal: no key, too large, a limit) closes the
  connection (`Connection: close`, and no lingering read of the rest: see listeners.runner_options).
- aiohttp's own refusals (404, 405, 413) are answered in the plain envelope, `{"error": "..."}`.
- What a client's mistake or departure makes aiohttp log (a malformed request line, too many headers, a connection
  reset mid-body) is one line a minute per kind, with a count, not a traceback per request: an unauthenticated
  client must not be able to fill the log.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.streams import StreamReader
from aiohttp.typedefs import Middleware
from aiohttp.web_urldispatcher import _default_expect_handler

from llmgw.net.replies import in_plain, message_of, refusal

BODY_MIN_RATE = 64 * 1024  # bytes per second that a body must keep up, over every window, until it is all in
UPLOAD_GRACE_S = 1.0  # an upload younger than this is not judged by its rate at a cap: it has barely started

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Upload:
    content: StreamReader
    started: float

    def rate(self, now: float) -> float:
        return self.content.total_bytes / max(now - self.started, UPLOAD_GRACE_S)


class Uploads:
    """The request bodies one listener is receiving, by aiohttp's RequestHandler (one per connection)."""

    def __init__(self) -> None:
        self.open: dict[Any, Upload] = {}

    def slowest(self, among: Callable[[Any], bool], now: float) -> Any | None:
        """The connection, of those `among` admits, whose body arrives most slowly on average (none under
        UPLOAD_GRACE_S old)."""
        judged = [(u.rate(now), h) for h, u in self.open.items() if now - u.started >= UPLOAD_GRACE_S and among(h)]
        return min(judged, key=lambda x: x[0])[1] if judged else None


def request_bounds(header_timeout: float, uploads: Uploads | None = None) -> Middleware:
    window = header_timeout
    listed = uploads if uploads is not None else Uploads()

    @web.middleware
    async def bounds(request: web.Request, handler: Handler) -> web.StreamResponse:
        limit = request.client_max_size
        length = request.content_length
        if _over_limit(request):
            raise _closing(refusal(web.HTTPRequestEntityTooLarge,
                                   f"request body of {length} bytes is over the limit of {limit}",
                                   max_size=limit, actual_size=length or 0))
        # never inflated (runner_options: auto_decompress off), never read
        if request.can_read_body and _encoded(request):
            raise _closing(refusal(web.HTTPUnsupportedMediaType,
                                   f"request bodies are read as sent: Content-Encoding "
                                   f"{request.headers['Content-Encoding'][:40]!r} is not accepted (send it "
                                   f"uncompressed; a few KB of gzip inflate to the whole body limit)"))
        if not request.can_read_body or request.content.is_eof():
            try:  # the common case, on every request: no timer, and no coroutine of plain_errors' own
                return await handler(request)
            except web.HTTPException as e:
                raise _plain(request, e) from None
        loop = asyncio.get_running_loop()
        deadline = asyncio.timeout(None)
        content = request.content
        listed.open[request.protocol] = Upload(content, loop.time())
        seen = [content.total_bytes]

        def check() -> None:
            if content.is_eof():  # all in: the handler runs on as long as its answer takes
                listed.open.pop(request.protocol, None)
                return
            got, seen[0] = content.total_bytes - seen[0], content.total_bytes
            # unread bytes waiting: the handler, not the client, is behind (and reading may be paused for it)
            if got < BODY_MIN_RATE * window and not _buffered(content):
                deadline.reschedule(loop.time())
                return
            timers[0] = loop.call_later(window, check)

        timers = [loop.call_later(window, check)]
        try:
            async with deadline:
                return _closing_unless_read(request, await plain_errors(handler, request))
        except TimeoutError:
            if not deadline.expired():
                raise
            raise _closing(refusal(
                web.HTTPRequestTimeout,
                f"request body arriving slower than {BODY_MIN_RATE // 1024} KiB/s over {window:g}s",
            )) from None
        except web.HTTPException as e:
            raise _closing_unless_read(request, e) from None
        finally:
            timers[0].cancel()
            listed.open.pop(request.protocol, None)

    return bounds


def _buffered(content: StreamReader) -> int:
    return int(getattr(content, "_size", 0))


R = TypeVar("R", bound=web.StreamResponse)


def _closing(resp: R) -> R:
    resp.force_close()
    return resp


def _closing_unless_read(request: web.Request, resp: R) -> R:
    """An answer that leaves the body unread ends the connection: what is left of the body is never read."""
    if not request.content.is_eof() and not resp.prepared:
        resp.force_close()
    return resp


async def expect_within_limits(request: web.Request) -> None:
    """`Expect: 100-continue` (curl sends it for bodies over 1 MB): a body announced over the limit is not invited
    ("100 Continue"): the 413 above answers it, in the application's envelope, before it is sent. Otherwise aiohttp's
    own answer. (The invitation still comes before a route's credentials are checked: they are its handler's.)"""
    if not _over_limit(request):
        await _default_expect_handler(request)


def _encoded(request: web.Request) -> bool:
    """Whether a request's body is sent compressed (or otherwise encoded): none of llmgw's listeners reads one."""
    return request.headers.get("Content-Encoding", "identity").strip().lower() not in ("", "identity")


def _over_limit(request: web.Request) -> bool:
    """Whether the body a request announces is over its application's limit (client_max_size; 0: none)."""
    limit, length = request.client_max_size, request.content_length
    return length is not None and bool(limit) and length > limit


async def plain_errors(handler: Handler, request: web.Request) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as e:
        raise _plain(request, e) from None


def _plain(request: web.Request, e: web.HTTPException) -> web.HTTPException:
    """aiohttp's refusal in the plain envelope; a redirect, or an answer already in JSON, as it is."""
    if e.status < 400 or e.content_type == "application/json":
        return e
    return in_plain(e, message_of(request, e))


CLIENT_FAULTS = (HttpProcessingError, ConnectionError)


class OncePerKind:
    """Counts what happens by kind and says when a kind is due to be reported: at most once every `every` seconds,
    with how many happened since it last was (the event loop's errors, clients' faults)."""

    def __init__(self, every: float = 60.0) -> None:
        self.every = every
        self.last: dict[str, float] = {}
        self.count: Counter[str] = Counter()

    def due(self, kind: str, now: float) -> int:
        """0 while the kind was reported less than `every` ago; else how many of it to report now."""
        self.count[kind] += 1
        if now - self.last.get(kind, float("-inf")) < self.every:
            return 0
        self.last[kind] = now
        n, self.count[kind] = self.count[kind], 0
        return n


class ClientFaults(logging.Filter):
    """On aiohttp's per-connection logger: a client's malformed request or its going away is one INFO line per kind
    a minute, with a count; anything else passes as aiohttp logged it."""

    def __init__(self, every: float = 60.0) -> None:
        super().__init__()
        self.quiet = OncePerKind(every)

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, CLIENT_FAULTS):
            return True
        kind = type(exc).__name__
        n = self.quiet.due(kind, time.monotonic())
        if not n:
            return False
        said = " ".join(str(exc).split())[:200]
        record.msg, record.args, record.exc_info, record.exc_text = (
            "client faults: %s (%s), %d in the last minute", (kind, said, n), None, None,
        )
        record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def connection_logger(name: str) -> logging.Logger:
    """The logger aiohttp's request handlers of one listener write to."""
    logger = logging.getLogger(f"llmgw.http.{name}")
    if not any(isinstance(f, ClientFaults) for f in logger.filters):
        logger.addFilter(ClientFaults())
    return logger
