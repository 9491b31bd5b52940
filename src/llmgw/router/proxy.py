"""Forward one request to an engine: retry elsewhere only if it never reached one; stream chunk by chunk."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from functools import cached_property

import aiohttp
from aiohttp import web
from yarl import URL

from llmgw.core.errors import ClientGone, ConnectFailed, StreamBroken, UpstreamError
from llmgw.router.adapters import StreamRename
from llmgw.router.errors import openai_error, sse_error
from llmgw.router.faults import not_found_about_request, request_fault
from llmgw.router.message_start import MessageStart
from llmgw.router.usage import StreamUsage, usage_from_body
from llmgw.wire.messages import UNREACHED_HEADER


@dataclass(slots=True)
class Outcome:
    status: int
    prompt_tokens: int = 0
    completion_tokens: int = 0
    response: web.StreamResponse | None = None
    about_request: bool = False  # a 404 about what the request names (faults.py): the path is served there


@dataclass(frozen=True)
class Timeouts:
    connect: float
    first_byte: float
    between_chunks: float
    queue: float = 0.0  # waiting for a free connection to the replica, beyond `connect`

    @cached_property
    def client(self) -> aiohttp.ClientTimeout:
        """aiohttp's form, made once: `connect` also bounds the wait for a free connection in the replica's pool
        (requests queue there first)."""
        return aiohttp.ClientTimeout(total=None, connect=self.queue + self.connect, sock_connect=self.connect,
                                     sock_read=self.first_byte)


# What the router relays from an engine: its own JSON or event stream, with the status it chose, and nothing else.
# A redirect is never followed (it could point anywhere, the management API included), an engine refusing the
# router's secret is the operator's problem rather than the client's, and a body of another type is not an answer.
RELAYED_TYPES = ("application/json", "text/event-stream")
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
CLIENT_CHECK_S = 0.25  # while a whole answer is awaited, how often the client is looked for (a left one: given up)
NOT_SERVED = (404, 405, 501)  # an engine's ways of saying it has no such endpoint
NOT_FOUND_READ = 64 * 1024  # of a 404's body, to tell a path not served from a request naming something unknown
CLIENT_CLOSED = 499  # nginx's word for it: the client closed the connection before the answer ended


def _unexpected(why: str) -> Outcome:
    return Outcome(502, response=openai_error(502, f"the engine {why}", "upstream_error", "upstream_error"))


async def _gone(url: str | URL, within: float) -> bool:
    """Whether nothing listens at the engine's address any more: a new connection is refused."""
    u = URL(url)
    try:
        async with asyncio.timeout(within):
            _, w = await asyncio.open_connection(u.host, u.port)
    except (ConnectionRefusedError, ConnectionResetError):
        return True
    except (OSError, TimeoutError):
        return False  # unreachable or slow is not "gone": it may have the request
    w.close()
    return False


def broken(e: StreamBroken) -> Outcome:
    """What a broken exchange is answered and recorded as: the stream already begun (its end says what broke), or
    the error envelope."""
    if isinstance(e.answered, web.StreamResponse):
        return Outcome(e.status, *e.seen, e.answered)
    code = "upstream_timeout" if e.status == 504 else "upstream_error"
    return Outcome(e.status, *e.seen, openai_error(e.status, str(e), "upstream_error", code))


@dataclass(frozen=True, slots=True)
class Attempt:
    """One try of a request at one replica's engine: what is sent where, and how its answer is relayed."""

    request: web.Request  # the client's: a stream is relayed to it as it arrives
    session: aiohttp.ClientSession
    url: str | URL
    body: bytes
    stream: bool
    timeouts: Timeouts
    watch: StreamUsage | None = None  # follows a stream's usage: the caller reads it however the try ends
    secret: str = ""  # the replica's, which its engine asks of the router
    trace: object = None  # to the session's trace hooks (the router can time the wait for a connection with them)
    said: dict[str, str] | None = None  # headers the answer carries (how it was routed)
    fresh_for_stream: bool = False  # a stream gets a connection of its own (engine_headers says why)
    opening: MessageStart | None = None  # a Messages stream's beginning, put where the engine left out message_start
    rename: tuple[bytes, bytes] | None = None  # (what, by what) in the answer: an adapter's name for its model's
    early: web.StreamResponse | None = None  # a stream's answer begun while it waited for its model: relayed into


async def forward(a: Attempt) -> Outcome:
    """Raises ConnectFailed when nothing was sent to the engine (it could not be reached, or no connection to it
    came free in time): safe to try elsewhere, and nothing to record. Raises StreamBroken when the engine failed
    after it had the request: never retried, recorded with what was seen. Raises ClientGone when the client left
    before a whole answer was read: the exchange is given up, its connection to the engine closed, so the engine
    stops generating for nobody (a stream's relay sees its client leave itself)."""
    if a.stream:
        return await _exchange(a)
    exchange = asyncio.ensure_future(_exchange(a))
    try:
        while True:
            done, _ = await asyncio.wait({exchange}, timeout=CLIENT_CHECK_S)
            if done:
                return exchange.result()
            t = a.request.transport
            if t is None or t.is_closing():
                raise ClientGone("the client left before its answer")
    finally:  # the client gone, or this wait itself cancelled: the exchange ends with it, never for nobody
        if not exchange.done():
            exchange.cancel()
            with contextlib.suppress(asyncio.CancelledError, UpstreamError):
                await exchange


async def _exchange(a: Attempt) -> Outcome:
    t, headers = a.timeouts, engine_headers(a.stream and a.fresh_for_stream, a.secret)
    try:
        resp = await a.session.post(a.url, data=a.body, headers=headers, timeout=t.client, allow_redirects=False,
                                    trace_request_ctx=a.trace)
    except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as e:
        raise ConnectFailed(f"{type(e).__name__}: {e}") from e
    except TimeoutError:
        raise StreamBroken("the engine did not answer in time", status=504) from None
    except aiohttp.ClientError as e:
        raise await _failed(e, a.url, t.connect) from e
    if resp.status == 502 and UNREACHED_HEADER in resp.headers:  # the node's gate: no engine had it
        resp.release()
        raise ConnectFailed("the engine is not reachable on its node (its agent's gate said so)")
    try:
        ctype = resp.headers.get("Content-Type", "application/json")
        if resp.status == 404 and ctype.startswith("application/json"):
            try:
                said = await _read_bounded(resp.content, NOT_FOUND_READ)
            except (aiohttp.ClientError, TimeoutError):
                said = None  # unreadable: taken as the path not served, as before
            words = not_found_about_request(said or b"")
            if words is not None:  # an unknown model or adapter, say: the client's to see, as the engine said it
                return Outcome(404, response=openai_error(404, words, "invalid_request_error", "not_found"),
                               about_request=True)
        refusal = _not_relayed(resp, ctype)
        if refusal is not None:
            return refusal
        if not a.stream or not ctype.startswith("text/event-stream"):
            try:
                if resp.content_length is not None:  # announced and within the bound (checked above)
                    data: bytes | None = await resp.read()
                else:
                    data = await _read_bounded(resp.content, MAX_RESPONSE_BYTES)
            except (aiohttp.ClientError, TimeoutError) as e:
                raise StreamBroken(f"the engine broke off: {type(e).__name__}") from e
            if data is None:
                return _unexpected(f"answered with a body over {MAX_RESPONSE_BYTES} bytes")
            words = request_fault(resp.status, data)
            if words is not None:  # the request's content, not the replica: a 4xx, never counted against it
                return Outcome(400, response=openai_error(400, f"the model cannot take this request: {words}",
                                                          "invalid_request_error", "unsupported_content"))
            p, c = usage_from_body(data) if resp.status == 200 else (0, 0)
            out = web.Response(status=resp.status, body=data if a.rename is None else data.replace(*a.rename),
                               headers={"Content-Type": ctype, **(a.said or {})})
            return Outcome(resp.status, p, c, out)
        # (the caller makes a watch for every request that asks for a stream)
        watch = a.watch if a.watch is not None else StreamUsage(strip=False)
        sr = a.early if a.early is not None else web.StreamResponse(status=resp.status, headers={
            "Content-Type": ctype, "Cache-Control": "no-cache", **(a.said or {})})
        return await _relay(a.request, sr, resp, watch, t.between_chunks, a.opening, a.rename)
    finally:
        resp.release()


def engine_headers(fresh: bool, secret: str) -> dict[str, str]:
    """What the router sends the engine with a request: `fresh`, a connection of the request's own."""
    headers = {"Content-Type": "application/json"}
    if fresh:
        # one connection for this stream: the engine (llama-server) drops its connection after a streamed answer
        # without saying so, and aiohttp pools a connection the moment an answer's last byte arrives, so the next
        # request sent on it failed ("Can not write request body", "Server disconnected"), unretried
        headers["Connection"] = "close"
    if secret:
        headers["Authorization"] = f"Bearer {secret}"
    return headers


async def _failed(e: aiohttp.ClientError, url: str | URL, within: float) -> ConnectFailed | StreamBroken:
    """What a request that failed before its answer's headers is raised as."""
    if isinstance(e, (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)) and await _gone(url, within):
        # a kept-alive connection to an engine that has died since: the request went nowhere (a dead engine
        # answers nothing and records nothing), so it is safe elsewhere, as a refused connection is
        return ConnectFailed(f"the engine is gone ({e}; its port refuses new connections)")
    return StreamBroken(f"the engine failed: {e}")


def _not_relayed(resp: aiohttp.ClientResponse, ctype: str) -> Outcome | None:
    """The outcome for an answer that is not relayed as it is (a redirect, a refused secret, no such endpoint, not
    JSON nor an event stream, too large); None for one that is."""
    if resp.status < 200 or 300 <= resp.status < 400:
        return _unexpected(f"answered {resp.status} (a redirect is never followed)")
    if resp.status in (401, 403):
        return _unexpected(f"refused the router's credentials ({resp.status}): is the replica's secret in place?")
    if resp.status in NOT_SERVED:  # whatever its body says: the caller names the path and the model
        return Outcome(resp.status, response=openai_error(
            404, f"the engine does not serve this path (it answered {resp.status})", "invalid_request_error",
            "unsupported_endpoint"))
    if not ctype.startswith(RELAYED_TYPES):
        return _unexpected(f"answered {resp.status} with content of type {ctype[:60]!r}")
    if resp.content_length is not None and resp.content_length > MAX_RESPONSE_BYTES:
        return _unexpected(f"answered with a body over {MAX_RESPONSE_BYTES} bytes")
    return None


async def _relay(request: web.Request, sr: web.StreamResponse, resp: aiohttp.ClientResponse, watch: StreamUsage,
                 between_chunks: float, opening: MessageStart | None,
                 rename: tuple[bytes, bytes] | None = None) -> Outcome:
    """Engine to client, chunk by chunk. Trouble reading from the engine ends the stream with an error event; a
    client that went away (an official client closes as soon as it has [DONE]) is expected, not an error: the
    engine is told by closing its connection, and the request is recorded with what was seen."""
    names = StreamRename(*rename) if rename is not None else None
    try:
        await sr.prepare(request)
        content = resp.content
        timed_on_socket = _between_chunks_on_socket(resp, between_chunks)
        while True:
            try:
                if timed_on_socket:
                    chunk = await content.readany()
                else:
                    async with asyncio.timeout(between_chunks):
                        chunk = await content.readany()
            except (aiohttp.ClientError, TimeoutError) as e:
                why = f"the engine {'went quiet' if isinstance(e, TimeoutError) else 'broke off'} mid-stream"
                await sr.write(_ended(watch, names) + sse_error(why, "upstream_stream_broken"))
                await sr.write_eof()
                raise StreamBroken(f"{why} ({type(e).__name__})", seen=watch.so_far(), answered=sr) from e
            if not chunk:
                if opening is None or not (chunk := opening.rest()):
                    break
            elif opening is not None:  # a Messages stream: message_start first (message_start.py)
                chunk = await opening.feed(chunk)
            out = watch.feed(chunk)
            if names is not None:  # an adapter's name where the engine wrote its model's (router/adapters.py)
                out = names.feed(out) + (names.rest() if watch.over else b"")
            if watch.over:  # the engine generates past what was reserved: what it could cost is all it gets to cost
                resp.close()
                why = "the engine went past the tokens reserved for this request"
                await sr.write(out + sse_error(why, "reservation_exceeded"))
                await sr.write_eof()
                raise StreamBroken(f"{why} ({watch.limit})", status=502, seen=watch.so_far(), answered=sr)
            if out:
                await sr.write(out)
        if tail := _ended(watch, names):
            await sr.write(tail)
        await sr.write_eof()
    except ConnectionError:
        resp.close()
        return Outcome(resp.status if watch.done else CLIENT_CLOSED, *watch.so_far(), sr)
    return Outcome(resp.status, *watch.so_far(), sr)


def _ended(watch: StreamUsage, names: StreamRename | None) -> bytes:
    """What is still the client's when the engine's stream ends: what the watch held back, what the rename kept."""
    held = watch.rest()
    return (names.feed(held) + names.rest()) if names is not None else held


async def _read_bounded(content: aiohttp.StreamReader, limit: int) -> bytes | None:
    """The whole body, or None once it passes `limit` bytes."""
    parts: list[bytes] = []
    size = 0
    while chunk := await content.read(65536):
        size += len(chunk)
        if size > limit:
            return None
        parts.append(chunk)
    return b"".join(parts)


def _between_chunks_on_socket(resp: aiohttp.ClientResponse, between_chunks: float) -> bool:
    """From the headers on, hold the engine to `between_chunks` between reads using aiohttp's own socket timer, which it
    re-arms on every arrival anyway: a timer of our own around each read would cost one per chunk."""
    conn = resp.connection
    protocol = conn.protocol if conn is not None else None
    if protocol is None or not hasattr(protocol, "read_timeout") or not hasattr(protocol, "start_timeout"):
        return False
    protocol.read_timeout = between_chunks
    protocol.start_timeout()
    return True
