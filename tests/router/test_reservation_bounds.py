"""The reservation bounds what the engine may generate (docs/tenants.md: "nothing admitted can cost more than it
reserved"). The engine's reading of a body is modelled on vLLM's:
  * chat: `max_tokens = self.max_completion_tokens or self.max_tokens` (vllm/entrypoints/openai/protocol.py,
    ChatCompletionRequest.to_sampling_params); fields are pydantic `int | None`, lax mode (1e5, "100000" accepted);
  * completions: CompletionRequest has `max_tokens` only (OpenAI's legacy API has no max_completion_tokens);
  * `n` choices each generate up to max_tokens; a list `prompt` on /v1/completions is a batch of prompts.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from llmgw.router.limits import Unreservable, reserve

DEFAULT_MAX = 1024
ENGINE_DEFAULT = 8192  # vLLM with no bound at all: up to the context left (here: a stand-in)


class _Chat(BaseModel):
    model_config = ConfigDict(extra="ignore")
    max_completion_tokens: int | None = None
    max_tokens: int | None = None
    n: int = 1


class _Completion(BaseModel):
    model_config = ConfigDict(extra="ignore")
    max_tokens: int | None = 16
    n: int = 1
    prompt: str | list[str] = ""


def engine_may_generate(path: str, body: bytes) -> int:
    """The most completion tokens vLLM may generate for this body (all choices, all prompts)."""
    raw: dict[str, Any] = json.loads(body)
    if path == "/v1/completions":
        c = _Completion.model_validate(raw)
        prompts = len(c.prompt) if isinstance(c.prompt, list) else 1
        return prompts * c.n * (c.max_tokens if c.max_tokens is not None else ENGINE_DEFAULT)
    r = _Chat.model_validate(raw)
    mt = r.max_completion_tokens or r.max_tokens
    return r.n * (mt if mt is not None else ENGINE_DEFAULT)


MSG = [{"role": "user", "content": "hi"}]
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "max_completion_tokens 0 falls back to max_tokens": (
        "/v1/chat/completions", {"model": "m", "messages": MSG, "max_completion_tokens": 0, "max_tokens": 100000}),
    "max_completion_tokens 0 alone: no bound at all": (
        "/v1/chat/completions", {"model": "m", "messages": MSG, "max_completion_tokens": 0}),
    "max_completion_tokens as a float (1e5)": (
        "/v1/chat/completions", {"model": "m", "messages": MSG, "max_completion_tokens": 100000.0}),
    "max_completion_tokens as a string": (
        "/v1/chat/completions", {"model": "m", "messages": MSG, "max_completion_tokens": "100000"}),
    "n=16 choices": ("/v1/chat/completions", {"model": "m", "messages": MSG, "max_tokens": 1000, "n": 16}),
    "completions ignore max_completion_tokens": (
        "/v1/completions", {"model": "m", "prompt": "hi", "max_completion_tokens": 1, "max_tokens": 100000}),
    "completions: a batch of 100 prompts": (
        "/v1/completions", {"model": "m", "prompt": ["a"] * 100, "max_tokens": 1000}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_reservation_bounds_what_the_engine_may_generate(name: str) -> None:
    path, payload = CASES[name]
    body = json.dumps(payload).encode()
    try:
        sent, cost = reserve(path, dict(payload), body, DEFAULT_MAX, media_tokens=0)
    except Unreservable:
        return  # refused (400): it reaches no engine
    may = engine_may_generate(path, sent)
    assert may <= cost, f"{name}: reserved {cost} tokens, the engine may generate {may}"
