"""Hostile bytes get a clear 4xx in the OpenAI envelope, one log line and no traceback, and change nothing."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from tests.harness import failures_logged
from tests.router.conftest import RouterUnderTest


async def raw_request(url: str, head: bytes, body: bytes = b"") -> tuple[int, bytes]:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(head + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    status = int(data.split(b" ", 2)[1])
    return status, data.split(b"\r\n\r\n", 1)[1]


async def test_an_authorization_header_that_is_not_utf8_is_401(
    rut: RouterUnderTest, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer llmgw-\xff\xfe\xc3(\r\n"
    status, body = await raw_request(rut.url, head + b"Content-Type: application/json\r\n", b"{}")
    assert status == 401 and json.loads(body)["error"]["code"] == "invalid_api_key"
    assert failures_logged(caplog) == []


async def test_deeply_nested_json_is_400(rut: RouterUnderTest, caplog: pytest.LogCaptureFixture) -> None:
    nested = b'{"model": "sim-a", "messages": ' + b"[" * 30_000 + b"]" * 30_000 + b"}"
    head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {rut.key}\r\n".encode()
    status, body = await raw_request(rut.url, head + b"Content-Type: application/json\r\n", nested)
    assert status == 400 and json.loads(body)["error"]["code"] == "invalid_json"
    assert failures_logged(caplog) == []


async def test_an_absurd_token_count_from_an_engine_is_not_a_count() -> None:
    from llmgw.router.usage import MAX_TOKENS, usage_from_body

    assert usage_from_body(b'{"usage": {"prompt_tokens": 9223372036854775808, "completion_tokens": "x"}}') == (
        MAX_TOKENS, 0)
    assert usage_from_body(b'{"usage": {"prompt_tokens": -5, "completion_tokens": true}}') == (0, 0)
