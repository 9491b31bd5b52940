"""The usage views name the operator's share "(operator)" where a key's name goes: no key may take that name, or
a tenant's GPU time would read as the operator's in `ctl usage`, the dashboard and the CSV's key_name column."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from llmgw.control.chargeback.charge_views import OPERATOR_NAME
from tests.harness import InProcessServer, aget, plan


async def test_a_key_cannot_be_named_as_the_operators_share(tmp_path: Path) -> None:
    p = plan(tmp_path, [], [{"name": "m", "source": "org/m", "engine": "sim", "scaling": {"min": 0, "max": 1}}])
    async with InProcessServer(p):
        token = (p.workdir / "state" / "admin.token").read_text().strip()
        async with aiohttp.ClientSession() as s, s.post(p.admin + "/api/keys", json={"name": OPERATOR_NAME},
                                                        headers={"Authorization": f"Bearer {token}"}) as r:
            assert r.status == 400, await r.text()
            assert OPERATOR_NAME in (await r.json())["error"]
        assert await aget(p, "/api/keys") == []  # nothing created
