"""A stream whose client did not ask for usage ends as the engine ends it for that client: llama-server puts its
`timings` on the event that ends the choices, and so does llmgw. llmgw asks the engine for usage itself (every
request is recorded), the engine then moves `timings` onto the usage event, and llmgw kept that event from the
client, timings and all. Now the finish event is held back until the usage event and carries its other fields.
The real router over a real control plane, a real llama-server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2 as httpx

from llmgw.core.clock import FakeClock
from llmgw.core.limits import KeyLimits
from llmgw.router.usage import StreamUsage
from tests.router.engines import Engine
from tests.router.test_limits import limited

BODY = {"model": "m", "stream": True, "max_tokens": 6, "temperature": 0,
        "messages": [{"role": "user", "content": "Name one colour."}]}


def events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]


async def test_the_finish_event_carries_llamacpps_timings_as_direct(tmp_path: Path, llama: Engine) -> None:
    async with limited(tmp_path, FakeClock(), engine_url=llama.url) as env, httpx.AsyncClient(timeout=60) as h:
        key = await env.key(KeyLimits())
        direct = events((await h.post(llama.url + "/v1/chat/completions", json=BODY)).text)
        assert "timings" in direct[-1] and direct[-1]["choices"][0]["finish_reason"], direct[-1]
        r = await h.post(env.url + "/v1/chat/completions", json=BODY, headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 200 and r.text.rstrip().endswith("data: [DONE]"), r.text
        got = events(r.text)
        assert all(e.get("choices") for e in got), "no usage-only event for a client that did not ask"
        assert not any(e.get("usage") for e in got)
        last = got[-1]
        assert last["choices"][0]["finish_reason"] and set(last["timings"]) == set(direct[-1]["timings"]), last


def test_a_finish_held_back_is_released_as_it_was_when_no_usage_comes() -> None:
    w = StreamUsage(strip=True)
    finish = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    assert w.feed(b'data: {"choices":[{"index":0,"delta":{"content":"red"},"finish_reason":null}]}\n\n' + finish) \
        == b'data: {"choices":[{"index":0,"delta":{"content":"red"},"finish_reason":null}]}\n\n'
    assert w.feed(b"data: [DONE]\n\n") == finish + b"data: [DONE]\n\n"
    w = StreamUsage(strip=True)
    w.feed(finish)
    assert w.rest() == finish and w.rest() == b""  # the stream ended without [DONE]: the client still has it
