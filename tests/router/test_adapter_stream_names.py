"""A streamed answer for a LoRA adapter names the adapter in every event, however the engine's bytes are split
between the router's reads: over a network an event arrives in several pieces, and a piece may end inside the
model's name. The engine here is the test's own stand-in for llama-server, so the split is where the test puts it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from llmgw.config.adapters import served_adapters
from llmgw.config.server import ModelSpec, ServerConfig, TLSFiles
from llmgw.core.clock import FakeClock
from llmgw.router.adapters import StreamRename, renamed
from llmgw.store.sqlite import SqliteStore
from tests.harness import free_port
from tests.router.conftest import serving
from tests.router.fakes import FakeState

BASE, ADAPTER = "smollm2", "smollm2-a"
FIRST = b'data: {"id":"c1","model":"smollm2","choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
SECOND_HEAD = b'data: {"id":"c1","model":"smol'  # the next event, cut inside the model's name
SECOND_TAIL = b'lm2","choices":[{"index":0,"delta":{"content":"!"}}]}\n\ndata: [DONE]\n\n'


def split_engine(go: asyncio.Event) -> web.Application:
    """Answers a streamed chat in two writes, the second only once `go` is set (the client has the first event)."""

    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(FIRST + SECOND_HEAD)
        await asyncio.wait_for(go.wait(), 10.0)
        await resp.write(SECOND_TAIL)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


@pytest.fixture
async def split_router(tmp_path: Path) -> AsyncIterator[tuple[str, str, asyncio.Event]]:
    go = asyncio.Event()
    runner = web.AppRunner(split_engine(go))
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    model = ModelSpec.model_validate({"name": BASE, "source": "/w/m.gguf", "engine": "llamacpp",
                                      "scaling": {"min": 1, "max": 1},
                                      "adapters": [{"name": ADAPTER, "source": "/w/a.gguf"}]})
    cfg = ServerConfig(tls=TLSFiles(ca="x", cert="x", key="x"), models=[model])
    store = SqliteStore(tmp_path / "llmgw.db").open()
    state = FakeState(cfg.models, FakeClock(), store)
    state.put_ready("smollm2-1", BASE, f"http://127.0.0.1:{port}")
    try:
        async with serving(state, store, cfg, "t") as (url, _router, key):
            yield url, key, go
    finally:
        await runner.cleanup()
        store.close()


async def test_a_name_split_between_reads_still_names_the_adapter(
        split_router: tuple[str, str, asyncio.Event]) -> None:
    url, key, go = split_router
    body = {"model": ADAPTER, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    got = b""
    async with asyncio.timeout(20), aiohttp.ClientSession() as s, s.post(
            url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}) as r:
        assert r.status == 200
        while b"\n\n" not in got:  # the first event has passed the router: its read ended inside the second
            chunk = await r.content.readany()
            assert chunk, got
            got += chunk
        go.set()
        got += await r.content.read()
    assert got.count(b'"model":"smollm2-a"') == 2 and b'"model":"smollm2"' not in got, got
    assert got.endswith(b"data: [DONE]\n\n"), got


def test_every_split_of_a_stream_is_renamed_as_the_whole() -> None:
    model = ModelSpec.model_validate({"name": BASE, "source": "/w/m.gguf", "engine": "llamacpp",
                                      "adapters": [{"name": ADAPTER, "source": "/w/a.gguf"}]})
    served = served_adapters([model])[ADAPTER]
    pair = renamed(model, served)
    assert pair is not None
    whole = FIRST + SECOND_HEAD + SECOND_TAIL + b'"model":"smollm2"'  # a name right at the end too
    for at in range(len(whole) + 1):
        names = StreamRename(*pair)
        got = names.feed(whole[:at]) + names.feed(whole[at:]) + names.rest()
        assert got == whole.replace(*pair), at
    names = StreamRename(*pair)
    assert b"".join(names.feed(whole[i:i + 1]) for i in range(len(whole))) + names.rest() == whole.replace(*pair)
