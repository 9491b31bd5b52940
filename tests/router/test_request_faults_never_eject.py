"""An engine's 5xx caused by the request's content is the client's error, never the replica's: a real llama-server
serving a text-only model answers an image part 500 ("image input is not supported"), which counted toward the
replica's ejection, so any key could take a healthy replica out of routing (12 requests, 4 ejections). Through the
real router over a real control plane: each such request is answered 400 with llama-server's words, and the replica
goes on serving."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx2 as httpx
import pytest

from llmgw.core.clock import FakeClock
from llmgw.core.limits import KeyLimits
from llmgw.router.faults import request_fault
from llmgw.router.table import EJECT_AFTER
from tests.router.engines import Engine
from tests.router.test_limits import limited

PIXEL = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJ"
         "RU5ErkJggg==")
WITH_IMAGE = {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": [
    {"type": "text", "text": "What is in this picture?"}, {"type": "image_url", "image_url": {"url": PIXEL}}]}]}
TEXT = {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "Name one colour."}]}


async def test_media_sent_to_a_text_model_is_the_clients_error_and_ejects_nothing(
        tmp_path: Path, llama: Engine, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    async with limited(tmp_path, FakeClock(), engine_url=llama.url) as env:
        key = await env.key(KeyLimits())
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(timeout=120) as h:
            direct = await h.post(llama.url + "/v1/chat/completions", json=WITH_IMAGE)
            assert direct.status_code >= 500, direct.text  # what llama-server itself answers
            assert request_fault(direct.status_code, direct.content) is not None, direct.text
            for _ in range(4 * EJECT_AFTER):
                r = await h.post(env.url + "/v1/chat/completions", json=WITH_IMAGE, headers=headers)
                assert r.status_code == 400, r.text
                error = r.json()["error"]
                assert error["code"] == "unsupported_content" and error["type"] == "invalid_request_error", error
                assert "image input is not supported" in error["message"], error
            ok = await h.post(env.url + "/v1/chat/completions", json=TEXT, headers=headers)
            assert ok.status_code == 200, ok.text  # its only replica still routed to
        assert "ejected from routing" not in caplog.text


def test_only_the_listed_words_make_a_5xx_the_requests_fault() -> None:
    said = b'{"error": {"code": 500, "message": "image input is not supported - hint: provide the mmproj"}}'
    assert request_fault(500, said) == "image input is not supported - hint: provide the mmproj"
    assert request_fault(500, b'{"error": "Conversation roles must alternate user/assistant"}') is not None
    for status, body in ((500, b'{"error": {"message": "CUDA error: out of memory"}}'), (503, b"Loading model"),
                         (500, b"image input is not supported"), (400, said), (502, b"")):
        assert request_fault(status, body) is None, (status, body)
