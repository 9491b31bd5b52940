"""The management API's malformed requests are 400s that say why, log one line, and change nothing."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from llmgw.dev.cluster import ClusterPlan, admin_get
from tests.harness import InProcessServer, failures_logged, plan


async def call(p: ClusterPlan, method: str, path: str, **kw: Any) -> tuple[int, str]:
    tf = p.workdir / "state" / "admin.token"
    headers = {"Authorization": f"Bearer {tf.read_text().strip()}"} if tf.exists() else {}
    async with aiohttp.ClientSession(headers=headers) as s, s.request(method, p.admin + path, **kw) as r:
        return r.status, await r.text()


async def test_bad_queries_and_bodies_are_400_with_one_line_each(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    p = plan(tmp_path, [], [])
    async with InProcessServer(p):
        assert (await call(p, "GET", "/api/events?limit=abc"))[0] == 400
        assert (await call(p, "GET", "/api/events?limit=-1"))[0] == 400
        assert (await call(p, "GET", "/api/events?limit=²"))[0] == 400
        assert (await call(p, "GET", "/api/events?limit=" + "9" * 5000))[0] == 400
        assert (await call(p, "GET", "/api/events?limit=999999999"))[0] == 200  # clamped
        for body in ('{"usage": [{"key_id": 1}]}', "[1, 2", '{"demand": "x"}', "[" * 50_000 + "]" * 50_000,
                     '{"usage": [{"key_id": "k", "model": "m", "replica_id": "r", "prompt_tokens": 9223372036854775808,'
                     ' "completion_tokens": 1, "started_at": 0, "duration_s": 0, "status": 200}]}'):
            s, text = await call(p, "POST", "/api/router/activity", data=body,
                                 headers={"Content-Type": "application/json"})
            assert s == 400, (body[:40], s, text[:200])
        for body in ("[" * 50_000 + "]" * 50_000, '{"name": ["x"]}', "null", '{"name": "x", "models": 3}'):
            s, _ = await call(p, "POST", "/api/keys", data=body, headers={"Content-Type": "application/json"})
            assert s == 400, body[:40]
        status = await asyncio.to_thread(admin_get, p, "/api/status")
        assert status["usage"] == [] and await asyncio.to_thread(admin_get, p, "/api/keys") == []
        # the store still takes writes: no transaction was left open by a refused one
        s, _ = await call(p, "POST", "/api/keys", json={"name": "after"})
        assert s == 201
    assert failures_logged(caplog) == []
