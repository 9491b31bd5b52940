"""A real router whose replicas are real engine processes, over a stand-in for the control plane (FakeState), or
over a real control plane (in-process, fake clock) where what is tested is how the two meet."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web

from llmgw.agent.engines.base import LaunchContext
from llmgw.config.server import ModelSpec, RouterConfig, ServerConfig, TLSFiles
from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.dev.cluster import SMOLLM2
from llmgw.router.app import Router
from llmgw.router.keys import KeyRing, new_key
from llmgw.router.long_marks import long_after
from llmgw.router.state import RouterState
from llmgw.store.sqlite import SqliteStore
from llmgw.wire.messages import ShardSpec
from tests.harness import await_until, free_port, local_state
from tests.router.engines import Engine, llama_server, sim
from tests.router.fakes import FakeState


@pytest.fixture(scope="session")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Engine]]:
    tmp = tmp_path_factory.mktemp("engines")
    started = {"sim-a": sim(tmp, "sim-a"), "sim-b": sim(tmp, "sim-b")}
    try:
        for e in started.values():
            e.wait()
        yield started
    finally:
        for e in started.values():
            e.kill()


def models() -> list[ModelSpec]:
    raw = [
        {"name": "smollm2", "source": SMOLLM2, "engine": "llamacpp", "scaling": {"min": 1, "max": 1}},
        {"name": "sim-a", "source": "org/a", "engine": "sim", "scaling": {"min": 1, "max": 2}},
        {"name": "sim-b", "source": "org/b", "engine": "sim", "scaling": {"min": 1, "max": 2}},
        {
            "name": "sim-od",
            "source": "org/od",
            "engine": "sim",
            "profile": {"gpus_per_shard": 8},
            "scaling": {"min": 0, "max": 1},
        },
        {"name": "sim-off", "source": "org/off", "engine": "sim"},
    ]
    return [ModelSpec.model_validate(m) for m in raw]


@pytest.fixture(scope="session")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """A real llama-server with the shipped model: started only for the tests that ask for it."""
    e = llama_server(tmp_path_factory.mktemp("llama"))
    try:
        yield e.wait()
    finally:
        e.kill()


def ready_replica(state: FakeState, rid: str, model: str, endpoint: str) -> None:
    state.put_ready(rid, model, endpoint)


@contextlib.asynccontextmanager
async def serving(state: RouterState, store: SqliteStore, cfg: ServerConfig, key_name: str
                  ) -> AsyncIterator[tuple[str, Router, str]]:
    """The real router over `state`, on a free loopback port, with one fresh API key: (url, router, raw key)."""
    keys = KeyRing(store)
    raw, rec = new_key(key_name, [], state.clock)
    store.put_key(rec)
    keys.reload()
    router = Router(state, keys, cfg.router, cfg.load_wait, cfg.max_body,
                    long_after=long_after(cfg.chargeback.settle_after))  # as the server makes it
    runner = web.AppRunner(router.app())
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}", router, raw
    finally:
        await runner.cleanup()
        await router.close()


@dataclass
class RouterUnderTest:
    url: str
    router: Router
    state: FakeState
    store: SqliteStore
    clock: FakeClock
    key: str
    db: Path


def server_config() -> ServerConfig:
    return ServerConfig(
        tls=TLSFiles(ca="x", cert="x", key="x"),
        models=models(),
        load_wait=0.5,
        max_body=64 * 1024,
        router=RouterConfig(between_chunks_timeout=1.0, first_byte_timeout=30.0),
    )


@pytest.fixture
async def rut(request: pytest.FixtureRequest, tmp_path: Path, engines: dict[str, Engine]
              ) -> AsyncIterator[RouterUnderTest]:
    """sim-a and sim-b are ready; smollm2 too when the test also asks for the `llama` fixture."""
    cfg = server_config()
    db = tmp_path / "llmgw.db"
    store = SqliteStore(db).open()
    clock = FakeClock()
    state = FakeState(cfg.models, clock, store)
    for name in ("sim-a", "sim-b"):
        state.put_ready(f"{name}-1", name, engines[name].url)
    if "llama" in request.fixturenames:
        # what the control plane says of it: its agent reports what the llama.cpp adapter declares
        from llmgw.agent.engines.llamacpp import LlamaCpp

        closes = LlamaCpp().launch(ShardSpec(replica_id="r", model="smollm2", engine="llamacpp", source=SMOLLM2,
                                             rank=0, world_size=1, serve_port=1),
                                   LaunchContext(binary="llama-server", model_path="m", host="h")).closes_after_stream
        state.put_ready("smollm2-1", "smollm2", request.getfixturevalue("llama").url, closes_after_stream=closes)
    try:
        async with serving(state, store, cfg, "tester") as (url, router, raw):
            yield RouterUnderTest(url, router, state, store, clock, raw, db)
    finally:
        store.close()


@dataclass
class PlaneRouter:
    url: str
    plane: ControlPlane
    key: str
    router: Router


@pytest.fixture
async def plane_router(tmp_path: Path) -> AsyncIterator[PlaneRouter]:
    """The router over a real control plane (no nodes): for how a request becomes demand, and demand a replica."""
    cfg = server_config()
    store = SqliteStore(tmp_path / "llmgw.db").open()
    plane = ControlPlane(cfg, store, FakeClock())
    plane.load()
    try:
        async with serving(local_state(plane), store, cfg, "tester") as (url, router, raw):
            yield PlaneRouter(url, plane, raw, router)
    finally:
        store.close()


async def settle(rut: RouterUnderTest) -> None:
    """Wait until the router has finished every request it began (a stream's record is made after its last byte
    left), then send its usage to the store."""

    async def finished() -> bool:
        return not rut.router.usage_journal.inflight

    await await_until(finished, 10, "every request finished in the router")
    assert await rut.router.usage_journal.flush()


@dataclass
class Bench:
    """A router over one engine stand-in served by the test itself (for what a real engine does too rarely to
    test: a pause after [DONE], a chosen concurrency)."""

    url: str
    router: Router
    store: SqliteStore
    key: str
    state: FakeState


@contextlib.asynccontextmanager
async def router_over(tmp_path: Path, engine: web.Application, router_cfg: RouterConfig | None = None
                      ) -> AsyncIterator[Bench]:
    eng_runner = web.AppRunner(engine)
    await eng_runner.setup()
    eng_port = free_port()
    await web.TCPSite(eng_runner, "127.0.0.1", eng_port).start()
    cfg = ServerConfig(tls=TLSFiles(ca="x", cert="x", key="x"), models=models(), router=router_cfg or RouterConfig())
    store = SqliteStore(tmp_path / "llmgw.db").open()
    state = FakeState(cfg.models, FakeClock(), store)
    state.put_ready("sim-a-1", "sim-a", f"http://127.0.0.1:{eng_port}")
    try:
        async with serving(state, store, cfg, "t") as (url, router, raw):
            yield Bench(url, router, store, raw, state)
    finally:
        await eng_runner.cleanup()
        store.close()
