"""/v1/models says each model's context length, as its engines serve it, in the fields clients read (vLLM's
max_model_len, and context_length): learned from a ready replica's own /v1/models (vLLM and SGLang's max_model_len,
llama-server's meta.n_ctx). Before, every entry was a name with `created: 0` and nothing a client could size a
prompt by. A model with no ready replica lists without it; an engine's answer in any other shape adds nothing."""

from __future__ import annotations

import json

import aiohttp
import pytest

from llmgw.router.model_facts import context_of
from llmgw.sim.server import SIM_CONTEXT
from tests.router.conftest import RouterUnderTest
from tests.router.engines import Engine


async def listing(rut: RouterUnderTest) -> dict[str, dict[str, object]]:
    async with aiohttp.ClientSession() as s, s.get(rut.url + "/v1/models",
                                                   headers={"Authorization": f"Bearer {rut.key}"}) as r:
        assert r.status == 200
        return {str(m["id"]): m for m in (await r.json())["data"]}


async def test_a_model_lists_the_context_its_engine_serves(rut: RouterUnderTest) -> None:
    got = await listing(rut)
    assert got["sim-a"]["max_model_len"] == got["sim-a"]["context_length"] == SIM_CONTEXT
    assert "max_model_len" not in got["sim-od"]  # nothing ready to ask
    async with aiohttp.ClientSession() as s, s.get(rut.url + "/v1/models/sim-b",
                                                   headers={"Authorization": f"Bearer {rut.key}"}) as r:
        assert (await r.json())["context_length"] == SIM_CONTEXT


async def test_llama_servers_context_per_slot_is_listed(rut: RouterUnderTest, llama: Engine) -> None:
    async with aiohttp.ClientSession() as s, s.get(llama.url + "/v1/models") as r:
        own = (await r.json())["data"][0]["meta"]["n_ctx"]
    assert isinstance(own, int) and own > 0
    assert (await listing(rut))["smollm2"]["max_model_len"] == own


@pytest.mark.parametrize("body", [
    b"not json", b"[]", b'{"data": {}}', b'{"data": [{"max_model_len": true}]}', b'{"data": [{"max_model_len": -1}]}',
    b'{"data": [{"max_model_len": 1e9}]}', b'{"data": [{"max_model_len": 4294967296}]}', b'{"data": [{"meta": 5}]}',
    b'{"data": ["x", {"meta": {"n_ctx": "8192"}}]}',
])
def test_an_answer_in_another_shape_says_nothing(body: bytes) -> None:
    assert context_of(body) is None


def test_the_first_entry_that_says_is_read() -> None:
    body = json.dumps({"data": [{"id": "a"}, {"meta": {"n_ctx": 2048}}, {"max_model_len": 9}]}).encode()
    assert context_of(body) == 2048
