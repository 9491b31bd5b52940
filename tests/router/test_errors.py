"""Every kind of bad request gets its own clear 4xx in the OpenAI envelope, and nothing reaches an engine."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import Any

import aiohttp

from llmgw.core.clock import FakeClock
from llmgw.router.keys import new_key
from tests.harness import await_until
from tests.router.conftest import PlaneRouter, RouterUnderTest, settle
from tests.router.engines import Engine


async def post(rut: RouterUnderTest, body: bytes,
               key: str | None = "default") -> tuple[int, dict[str, Any], dict[str, Any]]:
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {rut.key if key == 'default' else key}"
    async with aiohttp.ClientSession() as s, s.post(rut.url + "/v1/chat/completions", data=body, headers=headers) as r:
        return r.status, await r.json(), dict(r.headers)


def chat(model: str | None = "sim-a") -> bytes:
    body: dict[str, object] = {"messages": [{"role": "user", "content": "hi"}]}
    if model is not None:
        body["model"] = model
    return json.dumps(body).encode()


def prompt_tokens_seen(engine: Engine) -> float:
    with urllib.request.urlopen(engine.url + "/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("llamacpp:prompt_tokens_total"):
                return float(line.split()[-1])
    raise AssertionError("llama-server exposes no prompt token counter")


def envelope(body: dict[str, Any], code: str) -> str:
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["code"] == code, body
    return str(body["error"]["message"])


async def test_bad_requests_never_reach_the_engine(rut: RouterUnderTest, llama: Engine) -> None:
    before = prompt_tokens_seen(llama)
    s, b, _ = await post(rut, b"{not json")
    assert s == 400 and "not valid JSON" in envelope(b, "invalid_json")
    s, b, _ = await post(rut, chat(None))
    assert s == 400 and envelope(b, "missing_model") == "'model' is required" and b["error"]["param"] == "model"
    s, b, _ = await post(rut, json.dumps({"model": "smollm2", "pad": "x" * 70_000}).encode())
    assert s == 413 and envelope(b, "body_too_large")
    s, b, _ = await post(rut, chat("smollm2"), key=None)
    assert s == 401 and envelope(b, "missing_api_key")
    s, b, _ = await post(rut, chat("smollm2"), key="llmgw-wrong")
    assert s == 401 and envelope(b, "invalid_api_key")
    s, b, _ = await post(rut, chat("no-such-model"))
    assert s == 404 and "does not exist" in envelope(b, "model_not_found")
    assert prompt_tokens_seen(llama) == before


async def test_revoked_key(rut: RouterUnderTest) -> None:
    k = rut.router.keys.check(rut.key)
    assert k is not None
    assert (await post(rut, chat()))[0] == 200
    rut.store.put_key(k.model_copy(update={"revoked_at": rut.clock.now()}))
    rut.router.keys.reload()
    s, b, _ = await post(rut, chat())
    assert s == 401 and envelope(b, "invalid_api_key")


async def test_model_outside_the_keys_allow_list(rut: RouterUnderTest) -> None:
    raw, rec = new_key("only-b", ["sim-b"], rut.clock)
    rut.store.put_key(rec)
    rut.router.keys.reload()
    assert (await post(rut, chat("sim-b"), key=raw))[0] == 200
    s, b, _ = await post(rut, chat("sim-a"), key=raw)
    assert s == 403 and "may not use 'sim-a'" in envelope(b, "model_not_allowed")


async def test_switched_off_model_is_not_loading(rut: RouterUnderTest) -> None:
    s, b, _ = await post(rut, chat("sim-off"))
    assert s == 503 and "switched off" in envelope(b, "model_off")
    assert "sim-off" not in rut.state.demand


async def test_on_demand_model_triggers_a_load_then_says_loading(plane_router: PlaneRouter) -> None:
    pr = plane_router
    auth = {"Authorization": f"Bearer {pr.key}"}
    clock = pr.plane.clock
    assert isinstance(clock, FakeClock)
    asked_at = clock.now()

    async def load_wait_passes() -> None:  # the router waits by the injected clock: the test moves it
        await await_until(lambda: bool(pr.plane.activity.demand), 10, "the request asked for a load")
        clock.advance(5)

    mover = asyncio.create_task(load_wait_passes())
    async with aiohttp.ClientSession() as s, s.post(pr.url + "/v1/chat/completions", data=chat("sim-od"),
                                                    headers=auth) as r:
        status, b, h = r.status, await r.json(), r.headers
    await mover
    assert status == 503
    assert envelope(b, "model_loading").startswith("the model is loading")
    assert h["Retry-After"] == "10"
    assert pr.plane.activity.demand["sim-od"] == asked_at
    # its wait is marked for chargeback, whose load it asked for (router/long_marks.py), with its key
    assert await pr.router.usage_journal.flush()
    (waited,) = pr.plane.store.open_usage(asked_at + 60)
    key = next(k for k in pr.plane.store.list_keys())
    assert (waited.key_id, waited.model, waited.replica_id) == (key.id, "sim-od", "")
    assert (waited.started_at, waited.duration_s) == (asked_at, 5.0)
    # the reconciler turns that demand into a replica (which here cannot be placed: no nodes)
    pr.plane.passes.reconcile_once()
    od = [r for r in pr.plane.registry.replicas.values() if r.model == "sim-od"]
    assert len(od) == 1 and not od[0].placed
    assert od[0].explanation is not None and not od[0].explanation.placed
    # asked again, the answer says the replica's phase and reason code, never its id (nor nodes, hub details)
    mover = asyncio.create_task(load_wait_passes())
    async with aiohttp.ClientSession() as s, s.post(pr.url + "/v1/chat/completions", data=chat("sim-od"),
                                                    headers=auth) as r:
        said = envelope(await r.json(), "model_loading")
    await mover
    assert said == "the model is loading: a replica pending (Unschedulable)", said
    assert od[0].id not in said, said


async def test_raw_keys_are_never_stored(rut: RouterUnderTest) -> None:
    assert (await post(rut, chat()))[0] == 200
    await settle(rut)
    rut.store.db.execute("PRAGMA wal_checkpoint(FULL)")
    for f in rut.db.parent.glob("llmgw.db*"):
        assert rut.key.encode() not in f.read_bytes()


async def test_unknown_paths_and_methods_use_the_envelope(rut: RouterUnderTest) -> None:
    async with aiohttp.ClientSession() as s:
        async with s.get(rut.url + "/v1/nope") as r:
            assert r.status == 404
            assert envelope(await r.json(), "not_found").startswith("GET /v1/nope")
        async with s.get(rut.url + "/v1/chat/completions") as r:
            assert r.status == 405
            envelope(await r.json(), "method_not_allowed")
