"""A model whose every replica stopped answering (none ready, none loading) is refused at once, saying so (the
replicas' own words, ids and probes are the operator's: ctl explain) with a Retry-After: no load is under way, so
holding the request for load_wait would only hold the client. A model that is loading is still waited for. The
real router over a real control plane and its registry (the replica's Ready condition as a node's report sets it),
not a stand-in state that answers what the test told it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2 as httpx

from llmgw.config.server import ModelSpec, ServerConfig, TLSFiles
from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.core.conditions import ConditionType, Status, set_condition
from llmgw.core.limits import KeyLimits
from llmgw.core.reasons import Reason
from llmgw.records.state import ReplicaRecord, ShardAssignment
from llmgw.router.app import Router
from llmgw.router.keys import KeyRing
from llmgw.store.sqlite import SqliteStore
from tests.harness import await_until, free_port, local_state

PROBES = "not answering since 2027-01-15 08:00:00 UTC: 3 health probes missed in a row"


@contextlib.asynccontextmanager
async def serving(tmp_path: Path) -> AsyncIterator[tuple[str, str, ControlPlane, Router]]:
    """Models sim-od (on demand, its one replica unresponsive) and sim-b (on demand, nothing yet)."""
    from aiohttp import web

    clock = FakeClock()
    specs = [ModelSpec.model_validate({"name": n, "source": "org/m", "engine": "sim",
                                       "scaling": {"min": 0, "max": 1}}) for n in ("sim-od", "sim-b")]
    cfg = ServerConfig(tls=TLSFiles(ca="x", cert="x", key="x"), models=specs, load_wait=5.0)
    store = SqliteStore(tmp_path / "llmgw.db").open()
    hung = set_condition([], ConditionType.Ready, Status.FALSE, Reason.EngineUnresponsive, f"rank 0: {PROBES}",
                         clock.now())
    store.put_replica(ReplicaRecord(id="sim-od-1", model="sim-od", created_at=clock.now(), shards_expected=1,
                                    conditions=hung, assignments=[ShardAssignment(rank=0, node_id="gpu-07",
                                                                                  address="10.0.0.7")]))
    plane = ControlPlane(cfg, store, clock)
    plane.load()
    router = Router(local_state(plane), KeyRing(store), cfg.router, cfg.load_wait, cfg.max_body)
    raw, _ = await plane.credentials.create_key("t", [], KeyLimits())
    runner = web.AppRunner(router.app())
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}", raw, plane, router
    finally:
        await runner.cleanup()
        await router.close()
        store.close()


def chat(model: str) -> dict[str, object]:
    return {"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}


async def test_a_model_no_replica_of_which_answers_is_refused_at_once_with_why(tmp_path: Path) -> None:
    async with serving(tmp_path) as (url, key, plane, router), httpx.AsyncClient(timeout=30) as h:
        started = time.monotonic()
        r = await h.post(url + "/v1/chat/completions", json=chat("sim-od"), headers={"Authorization": f"Bearer {key}"})
        took = time.monotonic() - started
        assert r.status_code == 503, r.text
        error = r.json()["error"]
        assert error["code"] == "model_not_answering", error
        said = error["message"]
        assert said.startswith("no replica of sim-od is answering its health checks"), said
        for internal in ("sim-od-1", "gpu-07", "10.0.0.7", "probes"):  # the operator's detail stays the operator's
            assert internal not in said, said
        assert r.headers["Retry-After"] == "10"
        assert took < router.load_wait, f"held {took:.2f}s (load_wait {router.load_wait}s)"
        assert "sim-od" not in plane.activity.demand, "an on-demand model whose replica hangs is not asked to load"


async def test_a_model_that_is_loading_is_still_waited_for(tmp_path: Path) -> None:
    async with serving(tmp_path) as (url, key, plane, router), httpx.AsyncClient(timeout=30) as h:
        clock = plane.clock
        assert isinstance(clock, FakeClock)

        async def load_wait_passes() -> None:  # the router waits by the injected clock: the test moves it
            await await_until(lambda: asyncio.sleep(0, "sim-b" in plane.activity.demand), 10,
                              "the request asked for a load")
            clock.advance(router.load_wait)

        mover = asyncio.create_task(load_wait_passes())
        r = await h.post(url + "/v1/chat/completions", json=chat("sim-b"), headers={"Authorization": f"Bearer {key}"})
        await mover
        assert r.status_code == 503 and r.json()["error"]["code"] == "model_loading", r.text
