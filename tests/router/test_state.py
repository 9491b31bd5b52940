"""A router worker's view of the control plane (router/state.py RemoteState) against the real management API of a
real control plane (SQLite in tmp_path, FakeClock), over loopback TCP through a relay that can lose an answer."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from aiohttp import web

from llmgw.control.http.admin_api import admin_app
from llmgw.core.limits import KeyLimits
from llmgw.router.state import RemoteState
from tests.harness import await_until, free_port, plane_in

TOKEN = "t" * 32


class LossyRelay:
    """Relays TCP to `target`; while `lose` is set, a request goes through but its answer never comes back (the
    connection is closed instead): an answer lost on the way."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.lose = False
        self.lost = 0

    async def _pipe(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await r.read(65536):
                w.write(data)
                await w.drain()
        w.close()

    async def handle(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        sr, sw = await asyncio.open_connection("127.0.0.1", self.target)
        if self.lose:
            sw.write(await cr.read(65536))  # the request arrives whole (it is small)
            await sw.drain()
            await sr.read(65536)  # the answer was made, and is dropped
            self.lost += 1
            cw.close()
            sw.close()
            return
        await asyncio.gather(self._pipe(cr, sw), self._pipe(sr, cw))


async def test_an_admission_whose_answer_is_lost_does_not_hold_the_keys_slot(tmp_path: Path) -> None:
    plane = plane_in(tmp_path)
    runner = web.AppRunner(admin_app(plane.status(), plane.limit_counters, plane.gauges, plane.health, TOKEN,
                                         frozenset({"127.0.0.1"})))
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    relay = LossyRelay(port)
    server = await asyncio.start_server(relay.handle, "127.0.0.1", 0)
    rport = server.sockets[0].getsockname()[1]
    state = RemoteState(f"http://127.0.0.1:{rport}", plane.clock, TOKEN)
    try:
        _, key = await plane.credentials.create_key("t", [], KeyLimits(concurrency=1))
        relay.lose = True
        lost = await state.admit(key, 10)
        assert relay.lost == 1 and not lost.admitted and lost.refusal == "limits_unavailable"
        relay.lose = False
        await state.flush()  # the worker's next report releases the ticket it chose
        await await_until(lambda: asyncio.sleep(0, not plane.limit_counters.tickets), 10, "the lost admission released")
        again = await state.admit(key, 10)
        assert again.admitted, f"the key's only slot is held by an admission nobody saw: {again.message}"
    finally:
        await state.close()
        server.close()
        await runner.cleanup()
