"""How a request was routed is the operator's business: by default no answer says it (no X-Llmgw-Route, whose
prefix match count told a client whether another tenant had sent its prompt, and no X-Llmgw-Worker), and the
router's debug log does."""

from __future__ import annotations

import logging
from pathlib import Path

import aiohttp
import pytest

from llmgw.router.keys import new_key
from tests.router.test_prefix_routing import SYSTEM, two_replicas


async def ask(url: str, key: str, content: str) -> dict[str, str]:
    body = {"model": "m", "messages": [{"role": "system", "content": content}, {"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession() as s, s.post(url + "/v1/chat/completions", json=body,
                                                    headers={"Authorization": f"Bearer {key}"}) as r:
        assert r.status == 200, await r.text()
        return {k.lower(): v for k, v in r.headers.items()}


async def test_a_tenant_cannot_tell_whether_another_sent_its_prompt(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    async with two_replicas(tmp_path, "prefix", expose=False) as (url, victim, state, seen):
        raw, rec = new_key("attacker", [], state.clock)
        state.store.put_key(rec)  # before the first request: the router reads its keys then
        with caplog.at_level(logging.DEBUG, logger="llmgw.router"):
            await ask(url, victim, SYSTEM)
            guessed, other = await ask(url, raw, SYSTEM), await ask(url, raw, "Something else entirely. " * 40)
        assert seen[:2] == ["r1", "r1"]  # the prefix index still works: the guess went where the victim's prompt did
        for answer in (guessed, other):
            assert not [h for h in answer if h.startswith("x-llmgw")], answer
        logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("routed:")]
        assert len(logged) == 3 and "PrefixHit; replica=r1; matched=4/4" in logged[1], logged
