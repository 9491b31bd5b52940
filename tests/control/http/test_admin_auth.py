"""The management API answers only the operator token's holder, and a browser page can neither read nor write it:
not with a text/plain POST from another site, not through a name rebound to 127.0.0.1."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from llmgw.config.loader import load
from llmgw.config.server import ServerConfig
from llmgw.control.server import serve
from llmgw.core.clock import SystemClock
from llmgw.core.errors import ConfigError
from llmgw.dev.cluster import ClusterPlan, admin_get
from tests.harness import InProcessServer, plan


def token(p: ClusterPlan) -> str:
    f = p.workdir / "state" / "admin.token"
    return f.read_text().strip() if f.exists() else ""


async def call(p: ClusterPlan, method: str, path: str, **kw: Any) -> tuple[int, str]:
    async with aiohttp.ClientSession() as s, s.request(method, p.admin + path, **kw) as r:
        return r.status, await r.text()


def key_names(p: ClusterPlan) -> list[str]:
    return [k["name"] for k in admin_get(p, "/api/keys")]


async def test_without_the_token_nothing_is_read_or_written(tmp_path: Path) -> None:
    p = plan(tmp_path, [], [])
    async with InProcessServer(p):
        for method, path in (("GET", "/api/keys"), ("GET", "/api/router/view"), ("GET", "/api/nodes"),
                             ("GET", "/metrics"), ("DELETE", "/api/keys/x")):
            assert (await call(p, method, path))[0] == 401, path
        s, _ = await call(p, "POST", "/api/keys", json={"name": "minted"})
        assert s == 401
        s, _ = await call(p, "POST", "/api/router/activity", json={"usage": [{
            "key_id": "k", "model": "m", "replica_id": "r", "prompt_tokens": 1, "completion_tokens": 1,
            "started_at": 0, "duration_s": 0, "status": 200}]})
        assert s == 401
        s, _ = await call(p, "POST", "/api/keys", json={"name": "x"}, headers={"Authorization": "Bearer wrong"})
        assert s == 401
        assert (await call(p, "GET", "/health"))[0] == 200  # liveness stays open: it says and changes nothing
        assert await asyncio.to_thread(key_names, p) == []
        status = await asyncio.to_thread(admin_get, p, "/api/status")
        assert status["usage"] == []


async def test_a_browser_page_cannot_mint_a_key_even_holding_the_token(tmp_path: Path) -> None:
    """A text/plain POST needs no CORS preflight, so a page can send one; a rebinding page names its own host."""
    p = plan(tmp_path, [], [])
    async with InProcessServer(p):
        auth = {"Authorization": f"Bearer {token(p)}"}
        page = {"Content-Type": "text/plain", "Origin": "http://evil.example", "Host": "evil.example"}
        s, _ = await call(p, "POST", "/api/keys", data='{"name": "page"}', headers=page)
        assert s in (401, 403)
        s, _ = await call(p, "POST", "/api/keys", data='{"name": "page"}', headers={**page, **auth})
        assert s == 403
        rebound = {"Host": f"evil.example:{p.admin_port}", **auth}
        assert (await call(p, "GET", "/api/keys", headers=rebound))[0] == 403
        cross = {"Origin": "http://evil.example", **auth}
        assert (await call(p, "POST", "/api/keys", json={"name": "cross"}, headers=cross))[0] == 403
        plain = {"Content-Type": "text/plain", **auth}
        assert (await call(p, "POST", "/api/keys", data='{"name": "plain"}', headers=plain))[0] == 415
        assert await asyncio.to_thread(key_names, p) == []
        s, _ = await call(p, "POST", "/api/keys", json={"name": "ok"}, headers=auth)
        assert s == 201 and await asyncio.to_thread(key_names, p) == ["ok"]


async def test_the_token_file_is_made_private_and_a_readable_one_is_refused(tmp_path: Path) -> None:
    p = plan(tmp_path, [], [])
    async with InProcessServer(p):
        f = p.workdir / "state" / "admin.token"
        assert stat.S_IMODE(f.stat().st_mode) == 0o600 and len(token(p)) >= 32
    os.chmod(f, 0o644)
    with pytest.raises(ConfigError, match="readable by others"):
        await serve(load(ServerConfig, p.workdir / "server.yaml"), SystemClock(), asyncio.Event())
