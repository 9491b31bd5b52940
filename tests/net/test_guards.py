"""The bounds every listener puts on a request (net/guards.py), on a real aiohttp server on loopback."""

from __future__ import annotations

import asyncio
import json
import logging

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage

from llmgw.net.guards import ClientFaults, request_bounds


def record(exc: BaseException | None) -> logging.LogRecord:
    return logging.LogRecord("aiohttp.server", logging.ERROR, __file__, 1, "Error handling request", (),
                             (type(exc), exc, None) if exc else None)


def test_client_faults_are_one_line_a_minute_and_other_errors_pass_untouched() -> None:
    f = ClientFaults(every=60.0)
    first = record(BadHttpMessage("Too many headers received"))
    assert f.filter(first) and first.levelno == logging.INFO and first.exc_info is None
    assert "BadHttpMessage" in first.getMessage() and "Too many headers" in first.getMessage()
    assert not f.filter(record(BadHttpMessage("again")))  # within the minute: counted, not logged
    assert f.filter(record(ConnectionResetError("gone")))  # another kind has its own minute
    ours = record(ValueError("a bug of ours"))
    assert f.filter(ours) and ours.levelno == logging.ERROR and ours.exc_info is not None
    plain = record(None)
    assert f.filter(plain) and plain.levelno == logging.ERROR


async def test_a_body_announced_over_the_limit_is_refused_before_it_is_read() -> None:
    read = []

    async def handler(request: web.Request) -> web.Response:
        read.append(await request.read())
        return web.json_response({})

    app = web.Application(client_max_size=100, middlewares=[request_bounds(5.0)])
    app.router.add_post("/", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 101\r\n\r\n")  # and no body at all
        await w.drain()
        async with asyncio.timeout(3):
            head = await r.readuntil(b"\r\n\r\n")
            length = next(int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length"))
            body = await r.readexactly(length)
        w.close()
        await w.wait_closed()
        assert head.startswith(b"HTTP/1.1 413")
        assert "over the limit of 100" in json.loads(body)["error"]
        assert read == []
    finally:
        await runner.cleanup()
