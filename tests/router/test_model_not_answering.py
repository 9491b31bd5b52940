"""A model whose every replica stopped answering (none ready, none loading) is refused at once, saying so (the
replicas' own words, ids and probes are the operator's: ctl explain) with a Retry-After: no load is under way, so
holding the request for load_wait would only hold the client. A model that is loading is still waited for."""

from __future__ import annotations

import asyncio
import time

from tests.harness import await_until
from tests.router.conftest import RouterUnderTest
from tests.router.test_errors import chat, envelope, post

WORDS = ("replica sim-od-1: rank 0: unresponsive (not answering since 2027-01-15 08:00:00 UTC: 3 health probes "
         "missed in a row (the last: health probe: TimeoutError))")


async def test_a_model_no_replica_of_which_answers_is_refused_at_once_with_why(rut: RouterUnderTest) -> None:
    rut.state.put_not_answering("sim-od", WORDS)
    started = time.monotonic()
    s, b, h = await post(rut, chat("sim-od"))
    took = time.monotonic() - started
    assert s == 503, b
    said = envelope(b, "model_not_answering")
    assert said.startswith("no replica of sim-od is answering its health checks"), said
    assert "sim-od-1" not in said and "probe" not in said, said  # the operator's detail stays the operator's
    assert h["Retry-After"] == "10"
    assert took < rut.router.load_wait, f"held {took:.2f}s (load_wait {rut.router.load_wait}s)"
    assert "sim-od" not in rut.state.demand, "an on-demand model whose replica hangs is not asked to load again"


async def test_a_model_that_is_loading_is_still_waited_for(rut: RouterUnderTest) -> None:
    rut.state.put_not_answering("sim-b", WORDS)  # another model's trouble is not this one's

    async def load_wait_passes() -> None:  # the router waits by the injected clock: the test moves it
        await await_until(lambda: "sim-od" in rut.state.demand, 10, "the request asked for a load")
        rut.clock.advance(rut.router.load_wait)

    mover = asyncio.create_task(load_wait_passes())
    s, b, _ = await post(rut, chat("sim-od"))
    await mover
    assert s == 503 and envelope(b, "model_loading").startswith("the model is loading")
