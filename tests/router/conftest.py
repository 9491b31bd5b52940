"""A real router over a real control plane (in-process, fake clock) whose replicas are real engine processes."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web

from llmgw.config.server import ModelSpec, RouterConfig, ServerConfig, TLSFiles
from llmgw.control.local_state import LocalState
from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.core.conditions import ConditionType, Status, set_condition
from llmgw.core.reasons import Reason
from llmgw.core.state import ReplicaRecord, ShardAssignment
from llmgw.dev.cluster import SMOLLM2
from llmgw.router.app import Router
from llmgw.router.keys import KeyRing, new_key
from llmgw.store.sqlite import SqliteStore
from tests.harness import await_until, free_port
from tests.router.engines import Engine, llama_server, sim


@pytest.fixture(scope="session")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Engine]]:
    tmp = tmp_path_factory.mktemp("engines")
    started = {"smollm2": llama_server(tmp), "sim-a": sim(tmp, "sim-a"), "sim-b": sim(tmp, "sim-b")}
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


def ready_replica(plane: ControlPlane, rid: str, model: str, endpoint: str) -> ReplicaRecord:
    now = plane.clock.now()
    r = ReplicaRecord(
        id=rid,
        model=model,
        created_at=now,
        shards_expected=1,
        ready_at=now,
        endpoint=endpoint,
        assignments=[ShardAssignment(rank=0, node_id="n1", address="127.0.0.1")],
        conditions=set_condition([], ConditionType.Ready, Status.TRUE, Reason.AllShardsReady, "", now),
    )
    plane.replicas[rid] = r
    plane.generation += 1
    return r


@contextlib.asynccontextmanager
async def serving(plane: ControlPlane, key_name: str) -> AsyncIterator[tuple[str, Router, str]]:
    """The real router over `plane`, on a free loopback port, with one fresh API key: (url, router, raw key)."""
    keys = KeyRing(plane.store)
    raw, rec = new_key(key_name, [], plane.clock)
    plane.store.put_key(rec)
    keys.reload()
    router = Router(LocalState(plane), keys, plane.cfg.router, plane.cfg.load_wait, plane.cfg.max_body)
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
    plane: ControlPlane
    store: SqliteStore
    clock: FakeClock
    key: str
    db: Path


@pytest.fixture
async def rut(tmp_path: Path, engines: dict[str, Engine]) -> AsyncIterator[RouterUnderTest]:
    cfg = ServerConfig(
        tls=TLSFiles(ca="x", cert="x", key="x"),
        models=models(),
        load_wait=0.5,
        max_body=64 * 1024,
        router=RouterConfig(idle_timeout=1.0, first_byte_timeout=30.0),
    )
    db = tmp_path / "llmgw.db"
    store = SqliteStore(db).open()
    clock = FakeClock()
    plane = ControlPlane(cfg, store, clock)
    plane.load()
    for name in ("smollm2", "sim-a", "sim-b"):
        ready_replica(plane, f"{name}-1", name, engines[name].url)
    try:
        async with serving(plane, "tester") as (url, router, raw):
            yield RouterUnderTest(url, router, plane, store, clock, raw, db)
    finally:
        store.close()


async def settle(rut: RouterUnderTest) -> None:
    """Wait until the router has finished every request it began (a stream's record is made after its last byte
    left), then send its usage to the store."""

    async def finished() -> bool:
        return not rut.router.ledger.inflight

    await await_until(finished, 10, "every request finished in the router")
    assert await rut.router.ledger.flush()


@dataclass
class Bench:
    """A router over one engine stand-in served by the test itself (for what a real engine does too rarely to
    test: a pause after [DONE], a chosen concurrency)."""

    url: str
    router: Router
    store: SqliteStore
    key: str


@contextlib.asynccontextmanager
async def router_over(tmp_path: Path, engine: web.Application, router_cfg: RouterConfig | None = None
                      ) -> AsyncIterator[Bench]:
    eng_runner = web.AppRunner(engine)
    await eng_runner.setup()
    eng_port = free_port()
    await web.TCPSite(eng_runner, "127.0.0.1", eng_port).start()
    cfg = ServerConfig(tls=TLSFiles(ca="x", cert="x", key="x"), models=models(), router=router_cfg or RouterConfig())
    store = SqliteStore(tmp_path / "llmgw.db").open()
    clock = FakeClock()
    plane = ControlPlane(cfg, store, clock)
    plane.load()
    ready_replica(plane, "sim-a-1", "sim-a", f"http://127.0.0.1:{eng_port}")
    try:
        async with serving(plane, "t") as (url, router, raw):
            yield Bench(url, router, store, raw)
    finally:
        await eng_runner.cleanup()
        store.close()
