"""Hostile origins: raw HTTP written by the test, so that an answer can lie in exactly one way."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from llmgw.agent.weights import local
from llmgw.agent.weights.fetcher import Failed, Ready
from llmgw.wire.messages import WeightsPlan
from tests.agent.weights.kit import fetcher, settled

DATA = os.urandom(2_000_000)
DIGEST = hashlib.sha256(DATA).hexdigest()
HALF = 1_000_000

Answer = Callable[[dict[str, str], int], Awaitable[bytes]]  # (request headers, request number from 1) -> raw reply


@asynccontextmanager
async def raw_origin(answer: Answer) -> AsyncIterator[tuple[int, list[dict[str, str]]]]:
    """An HTTP server that writes whatever `answer` returns, then hangs up (one request per connection)."""
    requests: list[dict[str, str]] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:] if x)}
            requests.append(headers)
            writer.write(await answer(headers, len(requests)))
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield port, requests
    finally:
        server.close()
        await server.wait_closed()


def honest(headers: dict[str, str], data: bytes = DATA) -> bytes:
    rng = headers.get("range", "")
    if rng.startswith("bytes=") and rng.endswith("-"):
        start = int(rng[6:-1])
        return (f"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {start}-{len(data) - 1}/{len(data)}\r\n"
                f"Content-Length: {len(data) - start}\r\n\r\n").encode() + data[start:]
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data


def cut_at_half() -> bytes:
    """The whole file announced, half of it sent, then the connection drops."""
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(DATA)}\r\n\r\n".encode() + DATA[:HALF]


async def test_a_416_after_a_cut_does_not_make_half_a_file_whole(tmp_path: Path) -> None:
    """A cut transfer, then an origin (or CDN edge) that answers the resume with 416 and a Content-Range that says
    the file is 2 MB: the 1 MB on disk must not be taken for the whole file (the catalog gives no size/digest)."""
    async def answer(h: dict[str, str], n: int) -> bytes:
        if n == 1:
            return cut_at_half()
        if n == 2:
            return (f"HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */{len(DATA)}\r\n"
                    "Content-Length: 0\r\n\r\n").encode()
        return honest(h)

    async with raw_origin(answer) as (port, _):
        f = fetcher(tmp_path)
        got = await settled(f, f"http://127.0.0.1:{port}/model.gguf", WeightsPlan())
        assert isinstance(got, Ready), got
        assert got.path.stat().st_size == len(DATA), "half a file was given its final name"
        await f.close()


async def test_a_short_206_is_not_taken_for_the_whole_file(tmp_path: Path) -> None:
    """A server may answer an open range with less than the rest (some CDNs cap a range): Content-Range says
    bytes H..H+999 of 2 MB. The rest must still be fetched, not the 1.001 MB on disk renamed as whole."""
    async def answer(h: dict[str, str], n: int) -> bytes:
        if n == 1:
            return cut_at_half()
        if n == 2:
            end = HALF + 999
            return (f"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {HALF}-{end}/{len(DATA)}\r\n"
                    "Content-Length: 1000\r\n\r\n").encode() + DATA[HALF:end + 1]
        return honest(h)

    async with raw_origin(answer) as (port, _):
        f = fetcher(tmp_path)
        got = await settled(f, f"http://127.0.0.1:{port}/model.gguf", WeightsPlan())
        assert isinstance(got, Ready), got
        assert got.path.stat().st_size == len(DATA), "a truncated file was given its final name"
        await f.close()


async def test_a_chunked_origin_cannot_overrun_the_weights_budget(tmp_path: Path) -> None:
    """No Content-Length and no size in the catalog: `room` is never asked, so the budget is not enforced."""
    async def answer(h: dict[str, str], n: int) -> bytes:
        body = b"".join(f"{len(DATA[i:i + 65536]):x}\r\n".encode() + DATA[i:i + 65536] + b"\r\n"
                        for i in range(0, len(DATA), 65536))
        return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body + b"0\r\n\r\n"

    budget = 500_000
    async with raw_origin(answer) as (port, _):
        f = fetcher(tmp_path, budget=budget)
        got = await settled(f, f"http://127.0.0.1:{port}/model.gguf", WeightsPlan())
        managed = local.managed_bytes(tmp_path)
        assert managed <= budget, f"{managed} bytes fetched under a {budget}-byte budget ({got})"
        await f.close()


async def test_an_origin_that_compresses_as_invited_is_fetched_whole(tmp_path: Path) -> None:
    """aiohttp advertises Accept-Encoding: gzip and decodes on the fly; a server that takes up the offer (nginx
    gzip, a CDN) makes Content-Length the compressed size, so the catalog's size never matches."""
    raw = b"GGUF" + bytes(1_500_000) + os.urandom(1000)

    async def answer(h: dict[str, str], n: int) -> bytes:
        if "gzip" in h.get("accept-encoding", ""):
            z = gzip.compress(raw)
            return (f"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: {len(z)}\r\n\r\n").encode() + z
        return honest(h, raw)

    async with raw_origin(answer) as (port, reqs):
        f = fetcher(tmp_path)
        got = await settled(f, f"http://127.0.0.1:{port}/model.gguf",
                            WeightsPlan(sha256=hashlib.sha256(raw).hexdigest(), size=len(raw)))
        assert not isinstance(got, Failed), (got, reqs[0].get("accept-encoding"))
        assert isinstance(got, Ready) and got.path.read_bytes() == raw
        await f.close()
