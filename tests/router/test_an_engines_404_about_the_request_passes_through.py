"""An engine's 404 about something the request names (vLLM's "The model `x` does not exist." for an adapter it has
not loaded) reaches the client as the engine said it, in OpenAI's envelope, and the path stays served there; a 404
saying only "Not Found" still means the engine has no such path. Before, every 404 was rewritten as "does not serve
this path", hiding the engine's words, and the path was taken as not served on that replica for a while: one
request for an unknown adapter sent the next good ones elsewhere. The real router over a real control plane; the
engine answers as vLLM does."""

from __future__ import annotations

from pathlib import Path

import httpx2 as httpx
from aiohttp import web

from llmgw.core.clock import FakeClock
from llmgw.core.limits import KeyLimits
from tests.router.test_limits import limited

UNKNOWN = {"error": {"message": "The model `m-tuned` does not exist.", "type": "NotFoundError", "param": "model",
                     "code": 404}}


def like_vllm() -> web.Application:
    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("user") == "unknown-adapter":
            return web.json_response(UNKNOWN, status=404)
        return web.json_response({"id": "x", "object": "chat.completion", "model": "m", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "blue"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}})

    async def not_found(request: web.Request) -> web.Response:
        return web.json_response({"detail": "Not Found"}, status=404)  # FastAPI's, for a path it has no route for

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/completions", not_found)
    return app


async def test_a_404_about_the_request_passes_through_and_the_path_stays_served(tmp_path: Path) -> None:
    async with limited(tmp_path, FakeClock(), engine=like_vllm()) as env:
        key = await env.key(KeyLimits())
        headers = {"Authorization": f"Bearer {key}"}
        body = {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "Name one colour."}]}
        async with httpx.AsyncClient(timeout=30) as h:
            r = await h.post(env.url + "/v1/chat/completions", json={**body, "user": "unknown-adapter"},
                             headers=headers)
            assert r.status_code == 404, r.text
            assert r.json()["error"]["message"] == "The model `m-tuned` does not exist.", r.text
            ok = await h.post(env.url + "/v1/chat/completions", json=body, headers=headers)
            assert ok.status_code == 200, ok.text  # the path is still served there
            gone = await h.post(env.url + "/v1/completions", json={"model": "m", "prompt": "x"}, headers=headers)
            assert gone.status_code == 404 and gone.json()["error"]["code"] == "unsupported_endpoint", gone.text
