"""A Messages API stream reaches the client opening with message_start even where the engine's does not
(llama-server leaves it out when its first token ends mid-character, e.g. the first bytes of an emoji): the
router writes one, with the input tokens the engine counts, and records them; a stream that has one is untouched."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
from aiohttp import web

from llmgw.router.message_start import MAX_HELD
from tests.router.conftest import Bench, router_over
from tests.router.test_stream_close import recorded

MESSAGE = {"model": "sim-a", "max_tokens": 8, "stream": True, "messages": [{"role": "user", "content": "Say hello."}]}
# llama-server's stream as it sent it when its first token was the first bytes of "🌟" (seen in a failed CI run)
WITHOUT_START = (
    b'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text",'
    b'"text":""}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta",'
    b'"text":"\xf0\x9f\x8c\x9f"}}\n\n'
    b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
    b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},'
    b'"usage":{"output_tokens":8}}\n\n'
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
)
START = (
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"chatcmpl-x","type":"message",'
    b'"role":"assistant","content":[],"model":"smollm2","stop_reason":null,"stop_sequence":null,'
    b'"usage":{"cache_read_input_tokens":19,"input_tokens":1,"output_tokens":0}}}\n\n'
)


def engine(stream: bytes, piece: int, counts: list[bytes]) -> web.Application:
    """Streams `stream` in writes of `piece` bytes (an event split across reads), after a ping comment as
    llama-server sends one; answers count_tokens with 20 (each body it was sent is kept in `counts`)."""

    async def messages(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b":\n\n")
        for at in range(0, len(stream), piece):
            await resp.write(stream[at : at + piece])
            await asyncio.sleep(0)  # a write of its own, not coalesced with the next
        await resp.write_eof()
        return resp

    async def count_tokens(request: web.Request) -> web.Response:
        counts.append(await request.read())
        return web.json_response({"input_tokens": 20})

    app = web.Application()
    app.router.add_post("/v1/messages", messages)
    app.router.add_post("/v1/messages/count_tokens", count_tokens)
    return app


async def stream_through(b: Bench) -> bytes:
    async with aiohttp.ClientSession() as s, s.post(b.url + "/v1/messages", json=MESSAGE,
                                                    headers={"x-api-key": b.key}) as r:
        assert r.status == 200
        return await r.read()


def events(body: bytes) -> list[tuple[str, dict[str, object]]]:
    """(name, data) of each event, comments left out."""
    out = []
    for block in body.decode().split("\n\n"):
        lines = [ln for ln in block.split("\n") if ln and not ln.startswith(":")]
        if lines:
            assert len(lines) == 2 and lines[0].startswith("event: ") and lines[1].startswith("data: "), block
            out.append((lines[0][7:], json.loads(lines[1][6:])))
    return out


async def test_a_stream_without_message_start_is_given_one_with_the_input_counted(tmp_path: Path) -> None:
    counts: list[bytes] = []
    async with router_over(tmp_path, engine(WITHOUT_START, 7, counts)) as b:
        body = await stream_through(b)
        rows = await recorded(b, 1)
    got = events(body)
    assert [name for name, _ in got] == ["message_start", "content_block_start", "content_block_delta",
                                         "content_block_stop", "message_delta", "message_stop"], body
    message = got[0][1]["message"]
    assert isinstance(message, dict) and str(message["id"]).startswith("msg_")
    assert {k: message[k] for k in ("type", "role", "content", "model", "usage")} == {
        "type": "message", "role": "assistant", "content": [], "model": "sim-a",
        "usage": {"input_tokens": 20, "output_tokens": 0}}
    assert body.endswith(WITHOUT_START)  # the engine's own events, whole and in order
    assert [json.loads(c)["messages"] for c in counts] == [MESSAGE["messages"]]  # the request's own input, counted
    assert rows == [(200, 20, 8)]


async def test_a_stream_with_message_start_is_relayed_as_sent_and_nothing_counted(tmp_path: Path) -> None:
    counts: list[bytes] = []
    async with router_over(tmp_path, engine(START + WITHOUT_START, 5, counts)) as b:
        body = await stream_through(b)
        rows = await recorded(b, 1)
    assert body == b":\n\n" + START + WITHOUT_START
    assert counts == [] and rows == [(200, 20, 8)]  # llama-server's input_tokens and cache_read_input_tokens


async def test_a_stream_that_ends_before_its_first_event_is_whole_is_relayed_as_sent(tmp_path: Path) -> None:
    counts: list[bytes] = []
    cut = WITHOUT_START[:60]  # the engine stopped mid-event: nothing to put a message before
    async with router_over(tmp_path, engine(cut, 7, counts)) as b:
        body = await stream_through(b)
        await recorded(b, 1)
    assert body == b":\n\n" + cut and counts == []


async def test_a_first_event_past_the_bound_is_relayed_before_it_is_whole(tmp_path: Path) -> None:
    """The router holds at most MAX_HELD bytes waiting for the first event: past that the client has them at once,
    while the engine still waits (here: for the client to have them)."""
    had_them = asyncio.Event()
    big = b'event: content_block_delta\ndata: {"text": "' + b"x" * MAX_HELD

    async def messages(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(big)
        await asyncio.wait_for(had_them.wait(), 10)
        await resp.write(b'"}\n\n')
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/messages", messages)
    async with router_over(tmp_path, app) as b, aiohttp.ClientSession() as s, s.post(
            b.url + "/v1/messages", json=MESSAGE, headers={"x-api-key": b.key}) as r:
        seen = b""
        while len(seen) < len(big):
            seen += await asyncio.wait_for(r.content.readany(), 10)
        had_them.set()
        assert seen == big
        assert seen + await r.content.read() == big + b'"}\n\n'
