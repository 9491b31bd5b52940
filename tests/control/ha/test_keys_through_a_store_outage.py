"""API keys while the shared store is away (PostgreSQL stopped): the router checks keys against those it knows (a key
this server made or revoked counts at once, without a store read; one another server changed counts once read), no
request waits on the store meanwhile, and keys are read again once it answers."""

from __future__ import annotations

import time

import aiohttp
import pytest

from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.router.reread import RETRY_S
from llmgw.store.postgres import CONNECT_TIMEOUT_S, RECONNECT_EVERY_S
from tests.harness import await_until, router_over
from tests.pg import Postgres

QUICK_S = CONNECT_TIMEOUT_S / 2  # well short of the pool's wait for a connection, which no request may wait


async def models(url: str, key: str) -> tuple[int, str, float]:
    """GET /v1/models with this key (authenticated as every request is): status, error code ("" if none), and the
    seconds it took."""
    began = time.monotonic()
    async with aiohttp.ClientSession() as s, s.get(url + "/v1/models", headers={"Authorization": f"Bearer {key}"},
                                                   timeout=aiohttp.ClientTimeout(total=60)) as r:
        body = await r.json()
        code = body["error"]["code"] if r.status != 200 else ""
        return r.status, str(code), time.monotonic() - began


@pytest.mark.parametrize("used", [True, False], ids=["used-before", "not-used-before"])
async def test_a_key_made_just_before_an_outage_is_answered_through_it(
        two: tuple[ControlPlane, ControlPlane, FakeClock], postgres: Postgres, used: bool) -> None:
    """A key made through this server (after its router read the keys: a request came), then the follow pass (which
    sees the keys' revision move: by this server's own write), then the store stops: requests with the key are
    answered at once. They were refused 503 after the pool's 10 s wait, each request re-reading the keys its own write
    had marked changed."""
    a, _, _ = two
    async with router_over(a) as (url, _):
        earlier, _ = await a.credentials.create_key("earlier", [])
        assert (await models(url, earlier))[:2] == (200, "")
        raw, _ = await a.credentials.create_key("t", [])
        if used:
            assert (await models(url, raw))[:2] == (200, "")
        version = a.credentials.keys_version
        await a.following.follow_store()
        assert a.credentials.keys_version == version, "its own key write counted as keys changed elsewhere"
        postgres.outage()
        try:
            for _ in range(3):
                status, code, took = await models(url, raw)
                assert (status, code) == (200, "") and took < QUICK_S, (status, code, took)
        finally:
            postgres.back()


async def test_while_the_store_is_away_keys_are_checked_against_those_known(
        two: tuple[ControlPlane, ControlPlane, FakeClock], postgres: Postgres) -> None:
    """With the store away: a key known live is answered; one revoked through this server, or through another
    and read before the outage, is refused 401; one made through another server and not yet read cannot be checked
    (503 store_unavailable, not a 401 that calls it invalid); none waits on the store. Once the store answers, the
    keys are read again and the new key is answered."""
    a, b, clock = two
    async with router_over(a) as (url, _):
        mine, _ = await a.credentials.create_key("mine", [])
        revoked_here, here = await a.credentials.create_key("revoked here", [])
        revoked_there, there = await b.credentials.create_key("revoked there", [])
        await a.following.follow_store()
        assert (await models(url, revoked_there))[:2] == (200, "")  # read through the other server's write
        await b.credentials.revoke_keys(lambda k: k.id == there.id)
        await a.following.follow_store()
        assert (await models(url, revoked_there))[:2] == (401, "invalid_api_key")  # read before the outage
        await a.credentials.revoke_keys(lambda k: k.id == here.id)
        made_there, _ = await b.credentials.create_key("made there", [])
        await a.following.follow_store()  # both writes seen: one of them another server's, so keys are read again
        postgres.outage()
        try:
            for key, want in ((mine, (200, "")), (revoked_here, (401, "invalid_api_key")),
                              (revoked_there, (401, "invalid_api_key")), (made_there, (503, "store_unavailable")),
                              (mine, (200, ""))):
                status, code, took = await models(url, key)
                assert (status, code) == want and took < QUICK_S, (key[:14], status, code, took)
        finally:
            postgres.back()
        await await_until(lambda: _answered(url, made_there, clock), CONNECT_TIMEOUT_S + RECONNECT_EVERY_S + 10,
                          "the key made through the other server answered once the store is back", interval=0.2)


async def _answered(url: str, key: str, clock: FakeClock) -> bool:
    clock.advance(RETRY_S)  # a read that failed is tried again
    return (await models(url, key))[0] == 200
