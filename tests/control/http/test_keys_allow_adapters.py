"""A key may be allowed a LoRA adapter by its name, at creation and in a PATCH; a name the catalog has neither as a
model nor as an adapter is still refused."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from llmgw.config.server import ModelSpec
from llmgw.control.http.keys_api import key_routes
from llmgw.core.clock import FakeClock
from tests.control.tenants.test_budget_across_restarts import plane


async def test_an_adapter_is_a_name_a_key_may_be_allowed(tmp_path: Path) -> None:
    p = plane(tmp_path, FakeClock())
    models = {"m": ModelSpec.model_validate({"name": "m", "source": "/w/m.gguf", "engine": "llamacpp",
                                             "adapters": [{"name": "m-ft", "source": "/w/ft.gguf"}]})}
    app = web.Application()
    app.add_routes(key_routes(p.credentials, p.limit_counters, p.storage, models))
    async with TestClient(TestServer(app)) as client:
        r = await client.post("/api/keys", json={"name": "t", "models": ["m-ft"]})
        assert r.status == 201, await r.text()
        kid = (await r.json())["id"]
        r = await client.patch(f"/api/keys/{kid}", json={"models": ["m", "m-ft"]})
        assert r.status == 200 and (await r.json())["models"] == ["m", "m-ft"], await r.text()
        r = await client.post("/api/keys", json={"name": "t", "models": ["m-none"]})
        assert r.status == 400 and "unknown model(s): m-none" in await r.text()
        assert (await client.patch(f"/api/keys/{kid}", json={"models": ["m-none"]})).status == 400
