"""A budget for a request's headers, whoever sends them, before anything is authenticated.

aiohttp bounds each header line (8190 bytes) and their count (64), not their sum: a connection that sent the most
those allow and never finished its headers made the server hold about 1 MB, 1,000 of them a gigabyte, much of it
kept after they closed. Here each request's line and headers together may take `HEADER_BUDGET` bytes; past it the
connection is answered 431 and closed, so what it made the server hold goes with it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp.web_protocol import RequestHandler

from llmgw.net.guards import OncePerKind

log = logging.getLogger(__name__)

HEADER_BUDGET = 32 * 1024
_BODY = b'{"error": "request headers over %d bytes"}' % HEADER_BUDGET
TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: application/json\r\nConnection: close\r\n"
    + b"Content-Length: %d\r\n\r\n" % len(_BODY) + _BODY
)
_quiet = OncePerKind(60.0)


class HeaderBudget(asyncio.Protocol):
    """Stands between a connection and aiohttp's RequestHandler: counts what arrives while a request's headers are
    not all in (a body, once they are, is not counted: guards.py bounds it), before aiohttp's parser holds it. Of
    requests pipelined in one read, only the first is counted (the others are whole, and answered in turn)."""

    def __init__(self, handler: RequestHandler) -> None:
        self.handler = handler
        self.spent = 0  # bytes of the present request's headers so far
        self.tail = b""  # the last bytes of them: the blank line that ends them may span two reads
        self.body: Any = None  # the last request's body (aiohttp's StreamReader) while it arrives

    def data_received(self, data: bytes) -> None:
        h = self.handler
        if self.body is None or self.body.is_eof():  # in a request's headers: they end at the first blank line
            end = (self.tail + data).find(b"\r\n\r\n") if self.tail else data.find(b"\r\n\r\n")
            took = self.spent + (len(data) if end < 0 else end + 4 - len(self.tail))
            if took > HEADER_BUDGET:
                self._refuse()
                return
            if end < 0:
                self.spent, self.tail = took, data[-3:]
        seen = h._request_count
        h.data_received(data)
        if h._request_count != seen:  # a request's headers are all in: the next one starts with a whole budget
            self.spent, self.tail = 0, b""
            self.body = h._messages[-1][1] if h._messages else None

    def _refuse(self) -> None:
        h = self.handler
        if h.transport is not None:
            h.transport.write(TOO_LARGE)
        h.force_close()
        n = _quiet.due("over", asyncio.get_running_loop().time())
        if n:
            log.warning("%d connection(s) closed in the last minute for request headers over %d bytes", n,
                        HEADER_BUDGET)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.handler.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.handler.connection_lost(exc)

    def eof_received(self) -> None:
        self.handler.eof_received()

    def pause_writing(self) -> None:
        self.handler.pause_writing()

    def resume_writing(self) -> None:
        self.handler.resume_writing()
