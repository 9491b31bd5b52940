"""What clients and load tools ask of an OpenAI- or Anthropic-compatible server besides generations, answered as
the engines answer it: `GET /health` (guidellm probes it first and refused to run on the 404 llmgw gave) and
Anthropic's `POST /v1/messages/count_tokens` (the anthropic SDK's messages.count_tokens; coding agents use it),
which answered 404 in OpenAI's envelope while llama-server answers it. The real router over a real control plane;
the count from a real llama-server."""

from __future__ import annotations

from pathlib import Path

import httpx2 as httpx

from llmgw.core.clock import FakeClock
from llmgw.core.limits import KeyLimits
from tests.router.engines import Engine
from tests.router.test_limits import limited

COUNT = {"model": "m", "messages": [{"role": "user", "content": "Count the tokens of this sentence, please."}]}


async def test_health_answers_without_a_key_as_engines_do(tmp_path: Path) -> None:
    async with limited(tmp_path, FakeClock()) as env, httpx.AsyncClient(timeout=30) as h:
        r = await h.get(env.url + "/health")
        assert (r.status_code, r.json()) == (200, {"status": "ok"}), r.text


async def test_anthropics_count_tokens_is_the_engines_count(tmp_path: Path, llama: Engine) -> None:
    async with limited(tmp_path, FakeClock(), engine_url=llama.url) as env, httpx.AsyncClient(timeout=60) as h:
        key = await env.key(KeyLimits())
        direct = await h.post(llama.url + "/v1/messages/count_tokens", json=COUNT)
        assert direct.status_code == 200 and direct.json()["input_tokens"] > 0, direct.text
        r = await h.post(env.url + "/v1/messages/count_tokens", json=COUNT, headers={"x-api-key": key})
        assert r.status_code == 200, r.text
        assert r.json() == direct.json()
        bad = await h.post(env.url + "/v1/messages/count_tokens", json={"model": "nope", "messages": []},
                           headers={"x-api-key": key})
        assert bad.status_code == 404 and bad.json()["type"] == "error", bad.text  # Anthropic's envelope
