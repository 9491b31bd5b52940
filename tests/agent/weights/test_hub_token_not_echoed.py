"""A hub (or a proxy before it) that echoes the token it was sent, in its reason phrase or its X-Error-Code, does
not put it in the node's words: those are reported to the control plane and shown by ctl, the API and dashboard."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from aiohttp import web

from llmgw.agent.redirects import Redirects
from llmgw.agent.transfer import fetch_part
from llmgw.agent.weights.hubsource import Member, hub_source
from llmgw.core.errors import TransferFailed
from llmgw.wire.messages import WeightsPlan
from tests.harness import served

TOKEN = "hf_secret_token_5678"
COMMIT = "c" * 40


@pytest_asyncio.fixture
async def echo() -> AsyncIterator[tuple[list[int], str]]:
    status = [400]

    async def handle(request: web.Request) -> web.Response:
        said = request.headers.get("Authorization", "")
        return web.Response(status=status[0], reason=f"No {said}", headers={"X-Error-Code": "x" * 30 + said[7:]})

    async with served(handle) as url:
        yield status, url


@pytest.mark.parametrize("code", [400, 401, 403, 404, 410])
async def test_an_echoed_token_is_not_in_the_words(tmp_path: Path, echo: tuple[list[int], str], code: int) -> None:
    status, url = echo
    status[0] = code
    base = f"{url}/acme/m/resolve/{COMMIT}"
    plan = WeightsPlan(base_url=base, token=TOKEN)
    src = hub_source(f"{base}/config.json", plan, Member(f"hf://acme/m@{COMMIT}", COMMIT, "config.json"),
                     Redirects(allowed=("127.0.0.1",)))
    with pytest.raises(TransferFailed) as e:
        await fetch_part(src, tmp_path / "config.json.part", max_bytes=1000, progress=lambda *_: None)
    assert TOKEN[:10] not in str(e.value) and str(code) in str(e.value)
