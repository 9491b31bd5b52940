"""PATCH /api/keys/{id} (control/http/keys_api.py) against revocation and malformed input."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from llmgw.control.http.keys_api import key_routes
from llmgw.core.clock import FakeClock
from tests.control.tenants.test_budget_across_restarts import plane


async def test_patch_with_unhashable_models_is_a_400(tmp_path: Path) -> None:
    p = plane(tmp_path, FakeClock())
    _, rec = await p.credentials.create_key("t", [], None)
    app = web.Application()
    app.add_routes(key_routes(p.credentials, p.limit_counters, p.storage, p.registry.models))
    async with TestClient(TestServer(app)) as client:
        r = await client.patch(f"/api/keys/{rec.id}", json={"models": [{"a": 1}]})
        assert r.status == 400, f"answered {r.status}: {(await r.text())[:200]}"
