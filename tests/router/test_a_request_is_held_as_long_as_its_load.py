"""A request for a model with no ready replica is held as long as the model's load takes, not a fixed 15 s: as long
as its load is measured to take here (with a margin), or, before any load is measured, as long as a replica of it
is on its way, within router.max_load_wait. Before, every such request waited load_wait and got 503 model_loading:
the first client of any model that takes a minute to load (vLLM, SGLang on GPUs) never got an answer. The real
router over a real control plane; time on the injected clock, the load a replica placed and later made ready."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import openai
from aiohttp import web

from llmgw.config.server import ModelSpec, RouterConfig, ServerConfig, TLSFiles
from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.core.conditions import ConditionType, Status, set_condition
from llmgw.core.reasons import Reason
from llmgw.records.state import ReplicaRecord, ShardAssignment
from llmgw.router.waiting import KEEPALIVE, KEEPALIVE_AFTER_S
from llmgw.sim.behaviour import Behaviour
from llmgw.sim.server import make_app
from llmgw.store.sqlite import SqliteStore
from tests.harness import await_until, free_port, local_state
from tests.router.conftest import serving

LOAD_S = 60.0  # what the model takes to load here
LOAD_WAIT = 5.0
MODEL = ModelSpec.model_validate({"name": "slow", "source": "org/slow", "engine": "sim",
                                  "scaling": {"min": 0, "max": 1}})
CHAT = b'{"model": "slow", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}'


@contextlib.asynccontextmanager
async def setting(tmp_path: Path) -> AsyncIterator[tuple[ControlPlane, str, str, str]]:
    """(the plane, the router's URL, a key, the URL of the engine the replica will serve on)."""
    erun = web.AppRunner(make_app("slow", tokens=4, behaviour=Behaviour()))
    await erun.setup()
    eport = free_port()
    await web.TCPSite(erun, "127.0.0.1", eport).start()
    cfg = ServerConfig(tls=TLSFiles(ca="x", cert="x", key="x"), models=[MODEL], load_wait=LOAD_WAIT,
                       router=RouterConfig())
    store = SqliteStore(tmp_path / "llmgw.db").open()
    plane = ControlPlane(cfg, store, FakeClock())
    plane.load()
    try:
        async with serving(local_state(plane), store, cfg, "tester") as (url, _, raw):
            yield plane, url, raw, f"http://127.0.0.1:{eport}"
    finally:
        store.close()
        await erun.cleanup()


def replica(plane: ControlPlane, endpoint: str = "") -> ReplicaRecord:
    """The model's replica, placed and loading; with `endpoint`, ready there."""
    ready = set_condition([], ConditionType.Ready, Status.TRUE, Reason.AllShardsReady, "", plane.clock.now())
    return ReplicaRecord(id="slow-1", model="slow", created_at=plane.clock.now(), shards_expected=1,
                         assignments=[ShardAssignment(rank=0, node_id="n1", address="127.0.0.1", gpus=[0])],
                         conditions=ready if endpoint else [], endpoint=endpoint)


async def ask(url: str, key: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as s, s.post(url + "/v1/chat/completions", data=CHAT, headers={
            "Authorization": f"Bearer {key}", "Content-Type": "application/json"}) as r:
        return r.status, await r.text()


async def pass_time(plane: ControlPlane, seconds: float, step: float = 2.5) -> None:
    """The injected clock moved on by `seconds`, a step at a time, with the router looking between steps."""
    clock = plane.clock
    assert isinstance(clock, FakeClock)
    for _ in range(int(seconds / step)):
        clock.advance(step)
        await asyncio.sleep(0.05)


async def test_a_first_load_is_waited_for_while_its_replica_is_on_its_way(tmp_path: Path) -> None:
    async with setting(tmp_path) as (plane, url, key, engine):
        asked = asyncio.create_task(ask(url, key))
        await await_until(lambda: asyncio.sleep(0, "slow" in plane.activity.demand), 10, "the request asked")
        plane.registry.adopt_replicas([replica(plane)])  # placed: loading
        plane.registry.changed()
        await pass_time(plane, LOAD_S)  # twelve times load_wait: held, not refused
        assert not asked.done(), asked.result()
        plane.registry.adopt_replicas([replica(plane, endpoint=engine)])  # ready
        plane.registry.changed()
        status, body = await asyncio.wait_for(asked, 15)
        assert status == 200, body


async def test_a_measured_load_is_waited_for_with_a_margin_and_its_503_says_so(tmp_path: Path) -> None:
    async with setting(tmp_path) as (plane, url, key, engine):
        plane.ready_times._learn(("slow", "sim", "cpu", "load"), LOAD_S, plane.clock.now())
        asked = asyncio.create_task(ask(url, key))
        await await_until(lambda: asyncio.sleep(0, "slow" in plane.activity.demand), 10, "the request asked")
        await pass_time(plane, LOAD_S)  # no replica placed at all: the measured load is still waited out
        assert not asked.done(), asked.result()
        await pass_time(plane, 30.0)  # past 60 x 1.25 + 10 s: refused, with the measured time in its words
        status, body = await asyncio.wait_for(asked, 15)
        assert status == 503 and "model_loading" in body and "it takes about 60s here" in body, body
        # and one that is ready in time is answered
        asked = asyncio.create_task(ask(url, key))
        await pass_time(plane, LOAD_S)
        plane.registry.adopt_replicas([replica(plane, endpoint=engine)])
        plane.registry.changed()
        status, body = await asyncio.wait_for(asked, 15)
        assert status == 200, body


async def test_a_model_with_nothing_on_its_way_is_refused_after_load_wait(tmp_path: Path) -> None:
    async with setting(tmp_path) as (plane, url, key, _):
        asked = asyncio.create_task(ask(url, key))
        await await_until(lambda: asyncio.sleep(0, "slow" in plane.activity.demand), 10, "the request asked")
        await pass_time(plane, LOAD_WAIT + 2.5)  # no replica placed (no nodes), nothing measured: not held on
        status, body = await asyncio.wait_for(asked, 15)
        assert status == 503 and "model_loading" in body, body


async def test_the_official_clients_default_settings_get_their_answer_streamed_or_not(tmp_path: Path) -> None:
    """A minute's load with openai's client as it comes (its timeouts, its retries): both answered, the stream kept
    alive with comments while it waited (which the client skips)."""
    async with setting(tmp_path) as (plane, url, key, engine):
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key=key)
        msgs: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]

        async def streamed() -> str:
            got = ""
            async for chunk in await client.chat.completions.create(model="slow", messages=msgs, max_tokens=4,
                                                                    stream=True):
                got += "".join(c.delta.content or "" for c in chunk.choices)
            return got

        whole = asyncio.create_task(client.chat.completions.create(model="slow", messages=msgs, max_tokens=4))
        stream = asyncio.create_task(streamed())
        await await_until(lambda: asyncio.sleep(0, plane.registry.models and "slow" in plane.activity.demand), 10,
                          "the requests asked")
        plane.registry.adopt_replicas([replica(plane)])
        plane.registry.changed()
        await pass_time(plane, LOAD_S)
        assert not whole.done() and not stream.done()
        plane.registry.adopt_replicas([replica(plane, endpoint=engine)])
        plane.registry.changed()
        answer = await asyncio.wait_for(whole, 15)
        assert answer.choices[0].message.content and answer.usage is not None
        assert await asyncio.wait_for(stream, 15)
        await client.close()


async def test_a_waiting_stream_is_kept_alive_and_ends_with_the_refusal_as_an_event(tmp_path: Path) -> None:
    async with setting(tmp_path) as (plane, url, key, _):
        plane.ready_times._learn(("slow", "sim", "cpu", "load"), LOAD_S, plane.clock.now())
        body = CHAT.replace(b'"max_tokens": 4', b'"max_tokens": 4, "stream": true')
        async with aiohttp.ClientSession() as s:
            asking = s.post(url + "/v1/chat/completions", data=body, headers={
                "Authorization": f"Bearer {key}", "Content-Type": "application/json"})
            task = asyncio.ensure_future(asking.__aenter__())
            await await_until(lambda: asyncio.sleep(0, "slow" in plane.activity.demand), 10, "the request asked")
            await pass_time(plane, KEEPALIVE_AFTER_S + 5)
            r = await asyncio.wait_for(task, 10)  # its answer begun while it waits: headers sent
            assert r.status == 200 and r.headers["Content-Type"].startswith("text/event-stream")
            assert await asyncio.wait_for(r.content.readuntil(b"\n\n"), 10) == KEEPALIVE
            await pass_time(plane, LOAD_S * 1.25 + 10)  # past the measured hold, nothing ready: the refusal
            rest = await asyncio.wait_for(r.content.read(), 10)
            assert rest.startswith(KEEPALIVE) and b'data: {"error"' in rest and b"model_loading" in rest, rest
            r.release()


async def test_a_waiting_messages_stream_ends_with_anthropics_error_event(tmp_path: Path) -> None:
    """On Anthropic's path the refusal is its `error` event in its envelope, which its clients raise."""
    async with setting(tmp_path) as (plane, url, key, _):
        plane.ready_times._learn(("slow", "sim", "cpu", "load"), LOAD_S, plane.clock.now())
        body = b'{"model": "slow", "max_tokens": 4, "stream": true, "messages": [{"role": "user", "content": "hi"}]}'
        async with aiohttp.ClientSession() as s:
            task = asyncio.ensure_future(s.post(url + "/v1/messages", data=body, headers={
                "x-api-key": key, "Content-Type": "application/json"}).__aenter__())
            await await_until(lambda: asyncio.sleep(0, "slow" in plane.activity.demand), 10, "the request asked")
            await pass_time(plane, KEEPALIVE_AFTER_S + 5)
            r = await asyncio.wait_for(task, 10)
            assert r.status == 200
            await pass_time(plane, LOAD_S * 1.25 + 10)
            rest = await asyncio.wait_for(r.content.read(), 10)
            assert b'event: error\ndata: {"type": "error", "error": {"type": ' in rest, rest
            assert b"model_loading" in rest, rest
            r.release()
