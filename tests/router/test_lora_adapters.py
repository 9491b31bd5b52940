"""LoRA adapters served as models, end to end on the CPU: a real llama-server loads two adapters made here (gguf),
the router sends a request for an adapter to its model's replica with the adapter named in the body, the answer
differs from the model's at temperature 0 and names the adapter, usage is recorded under it, and keys are
allowed adapters one by one."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from llmgw.config.server import ModelSpec, RouterConfig, ServerConfig, TLSFiles
from llmgw.core.clock import FakeClock
from llmgw.dev.cluster import SMOLLM2
from llmgw.router.keys import new_key
from llmgw.store.sqlite import SqliteStore
from tests.router.conftest import RouterUnderTest, serving, settle
from tests.router.engines import Engine
from tests.router.fakes import FakeState
from tests.router.lora import base_model_file, llama_with_adapters, make_adapter

# the fixture writes a LoRA adapter and runs a real llama-server (tests/tiers.py: not in the unit tier)
# its tests share a module fixture that starts processes: one worker runs them all (make test: --dist loadgroup)
pytestmark = [pytest.mark.real, pytest.mark.xdist_group("lora_adapters")]

BASE, PIRATE, LEGAL = "smollm2", "smollm2-pirate", "smollm2-legal"
PROMPT = [{"role": "user", "content": "Say hello"}]


@pytest.fixture(scope="module")
def adapter_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("adapters")
    return {PIRATE: make_adapter(base_model_file(), tmp / "pirate.gguf", seed=1),
            LEGAL: make_adapter(base_model_file(), tmp / "legal.gguf", seed=2)}


@pytest.fixture(scope="module")
def llama_lora(tmp_path_factory: pytest.TempPathFactory, adapter_files: dict[str, Path]) -> Iterator[Engine]:
    e = llama_with_adapters(tmp_path_factory.mktemp("llama-lora"), BASE, adapter_files)
    try:
        yield e.wait()
    finally:
        e.kill()


@pytest.fixture
async def lora_rut(tmp_path: Path, llama_lora: Engine, adapter_files: dict[str, Path]
                   ) -> AsyncIterator[RouterUnderTest]:
    model = ModelSpec.model_validate({
        "name": BASE, "source": SMOLLM2, "engine": "llamacpp", "scaling": {"min": 1, "max": 1},
        "adapters": [{"name": n, "source": str(p)} for n, p in adapter_files.items()]})
    cfg = ServerConfig(tls=TLSFiles(ca="x", cert="x", key="x"), models=[model], load_wait=0.5,
                       router=RouterConfig(between_chunks_timeout=5.0, first_byte_timeout=60.0))
    store = SqliteStore(tmp_path / "llmgw.db").open()
    clock = FakeClock()
    state = FakeState(cfg.models, clock, store)
    state.put_ready("smollm2-1", BASE, llama_lora.url, closes_after_stream=True)
    try:
        async with serving(state, store, cfg, "tester") as (url, router, raw):
            yield RouterUnderTest(url, router, state, store, clock, raw, tmp_path / "llmgw.db")
    finally:
        store.close()


def key_for(rut: RouterUnderTest, models: list[str]) -> str:
    raw, rec = new_key("limited", models, rut.clock)
    rut.store.put_key(rec)
    rut.router.keys.reload()
    return raw


async def chat(rut: RouterUnderTest, model: str, key: str = "", **extra: Any) -> tuple[int, dict[str, Any]]:
    body = {"model": model, "messages": PROMPT, "temperature": 0, "max_tokens": 12, **extra}
    async with aiohttp.ClientSession() as s, s.post(
            rut.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key or rut.key}"}) as r:
        return r.status, await r.json()


def said(answer: dict[str, Any]) -> str:
    return str(answer["choices"][0]["message"]["content"])


async def test_an_adapter_answers_otherwise_than_its_model_and_under_its_own_name(lora_rut: RouterUnderTest) -> None:
    status, base = await chat(lora_rut, BASE)
    assert status == 200 and base["model"] == BASE
    status, pirate = await chat(lora_rut, PIRATE)
    assert status == 200 and pirate["model"] == PIRATE, "the answer names the adapter asked for"
    status, legal = await chat(lora_rut, LEGAL)
    assert status == 200 and legal["model"] == LEGAL
    assert len({said(base), said(pirate), said(legal)}) == 3, (said(base), said(pirate), said(legal))
    # the engine keeps the last request's adapters for a body that names none: the router names them every time
    status, again = await chat(lora_rut, BASE)
    assert said(again) == said(base)
    status, pirate_again = await chat(lora_rut, PIRATE)
    assert said(pirate_again) == said(pirate)


async def test_a_streamed_answer_names_the_adapter(lora_rut: RouterUnderTest) -> None:
    body = {"model": PIRATE, "messages": PROMPT, "temperature": 0, "max_tokens": 4, "stream": True}
    async with aiohttp.ClientSession() as s, s.post(
            lora_rut.url + "/v1/chat/completions", json=body,
            headers={"Authorization": f"Bearer {lora_rut.key}"}) as r:
        text = (await r.read()).decode()
    assert r.status == 200 and f'"model":"{PIRATE}"' in text and f'"model":"{BASE}"' not in text


async def test_usage_is_recorded_under_the_adapter(lora_rut: RouterUnderTest) -> None:
    assert (await chat(lora_rut, PIRATE))[0] == 200
    assert (await chat(lora_rut, PIRATE))[0] == 200
    assert (await chat(lora_rut, BASE))[0] == 200
    await settle(lora_rut)
    counts = {u.model: u.requests for u in lora_rut.store.usage_totals()}
    assert counts == {PIRATE: 2, BASE: 1}


async def test_a_key_is_allowed_adapters_one_by_one(lora_rut: RouterUnderTest) -> None:
    base_only, pirate_only = key_for(lora_rut, [BASE]), key_for(lora_rut, [PIRATE])
    status, refused = await chat(lora_rut, PIRATE, base_only)
    assert status == 403 and refused["error"]["code"] == "model_not_allowed"
    assert (await chat(lora_rut, BASE, pirate_only))[0] == 403
    assert (await chat(lora_rut, PIRATE, pirate_only))[0] == 200
    # nor can a key allowed the model apply an adapter by naming its index to the engine
    _, plain = await chat(lora_rut, BASE, base_only)
    _, sneaked = await chat(lora_rut, BASE, base_only, lora=[{"id": 0, "scale": 1.0}])
    assert said(sneaked) == said(plain)


async def test_adapters_are_listed_as_models_of_their_parent(lora_rut: RouterUnderTest) -> None:
    async def listed(key: str) -> dict[str, Any]:
        async with aiohttp.ClientSession() as s, s.get(lora_rut.url + "/v1/models",
                                                       headers={"Authorization": f"Bearer {key}"}) as r:
            return {m["id"]: m.get("parent") for m in (await r.json())["data"]}

    assert await listed(lora_rut.key) == {BASE: None, PIRATE: BASE, LEGAL: BASE}
    assert await listed(key_for(lora_rut, [LEGAL])) == {LEGAL: BASE}
    async with aiohttp.ClientSession() as s, s.get(lora_rut.url + f"/v1/models/{PIRATE}",
                                                   headers={"Authorization": f"Bearer {lora_rut.key}"}) as r:
        assert r.status == 200 and (await r.json())["parent"] == BASE


async def test_no_surface_answers_with_adapters_other_than_the_one_asked_for(lora_rut: RouterUnderTest) -> None:
    """llama-server's Messages path reads no "lora" (it runs every adapter at its launch scale): a request there is
    answered as its chat request would be, or refused; never with another tenant's adapter applied."""
    for model in (BASE, PIRATE):
        _, chatted = await chat(lora_rut, model)
        body = {"model": model, "messages": PROMPT, "temperature": 0, "max_tokens": 12}
        async with aiohttp.ClientSession() as s, s.post(lora_rut.url + "/v1/messages", json=body,
                                                        headers={"x-api-key": lora_rut.key}) as r:
            status, answer = r.status, await r.json()
        if status == 200:
            assert answer["content"][0]["text"] == said(chatted), (model, answer, said(chatted))
        else:
            assert status == 404 and answer["error"]["type"] == "not_found_error", (model, answer)
            assert "LoRA" in answer["error"]["message"]
