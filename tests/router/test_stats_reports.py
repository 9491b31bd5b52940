"""What a router worker reports: a request the router fails is a 500, not a client that left (499); an idle worker
sends no report."""

from __future__ import annotations

from pathlib import Path

import aiohttp
from aiohttp import web

from llmgw.core.clock import FakeClock
from llmgw.core.errors import StoreError
from llmgw.router.state import RemoteState
from llmgw.router.stats import Recorder
from llmgw.store.base import ApiKeyRecord
from tests.router.conftest import router_over


def _engine() -> web.Application:
    async def chat(_: web.Request) -> web.Response:
        return web.json_response({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def test_a_request_the_router_fails_is_not_counted_as_a_client_that_left(tmp_path: Path) -> None:
    """Router.proxy starts with status = CLIENT_CLOSED and only replaces it with a returned response's status: any
    exception from _admit (here the key ring's store read failing, as a locked or broken SQLite does) is answered
    500 by openai_envelope but counted as 499 in llmgw_requests_total. A store outage then reads as clients
    hanging up, and a 5xx alert stays quiet. Fails today: {'499': 1}."""
    async with router_over(tmp_path, _engine()) as b:
        def broken() -> dict[str, list[ApiKeyRecord]]:
            raise StoreError("database is locked")

        b.router.keys.read = broken  # type: ignore[method-assign]
        b.router.auth.version = -1  # keys changed: the next request reads them again
        b.router.keys.by_prefix = {}  # and the key is not among those known: it cannot be checked (a 503)
        async with aiohttp.ClientSession() as s, s.post(
            b.url + "/v1/chat/completions", json={"model": "sim-a", "messages": []},
            headers={"Authorization": f"Bearer {b.key}"},
        ) as r:
            assert r.status == 503  # since: keys that cannot be read again are a 503 that says so, not a 500
        stats = b.router.recorder.snapshot()
        assert stats.in_flight == []
        assert stats.models[""].requests == {"503": 1}, stats.models[""].requests


async def test_an_idle_worker_sends_no_report_at_all() -> None:
    """The premise of the double count (test_router_stats_sums): with nothing new, flush posts nothing, so the
    control plane hears nothing from an idle worker and retires it after REPORTER_SILENT_AFTER. Passes today."""
    rs = RemoteState("http://127.0.0.1:9", FakeClock(), "token-not-used")
    rec = Recorder()
    rs.attach(rec)
    rs._reported = rec.version
    await rs.flush()
    assert rs._session is None  # nothing was sent
