"""The dashboard, /api/status and every /metrics scrape show GPU time from the charge book: it asks the store at
most once per REFRESH seconds whatever happens, so while the store is out (a PostgreSQL read can wait out its
connect timeout) views and scrapes show the last reading instead of each waiting on a failing read."""

from __future__ import annotations

import asyncio
from pathlib import Path

from llmgw.control.chargeback.charge_book import REFRESH, ChargeBook
from llmgw.core.clock import FakeClock
from llmgw.records.chargeback import ChargeRow
from llmgw.store.base import hour_of
from tests.harness import plane_in


async def test_the_store_is_asked_once_per_refresh_failing_or_not(tmp_path: Path) -> None:
    clock = FakeClock()
    plane = plane_in(tmp_path, clock)
    store = plane.storage.store
    store.put_charges([ChargeRow(hour=hour_of(clock.now()), key_id="k1", model="m", gpu_class="c", busy_s=10)],
                      [], 0.0, 0.0)
    asked: list[float] = []
    read = store.charges_by_key_model

    def counted(since: float) -> list[ChargeRow]:
        asked.append(since)
        return read(since)

    store.charges_by_key_model = counted  # type: ignore[method-assign]  # counts the real store's reads
    book = ChargeBook("EUR")
    since = clock.now() - 3600
    shown = await asyncio.gather(*(book.charges_by_key(plane.storage, since, {"k1": "team"}) for _ in range(3)))
    assert len(asked) == 1  # views at the same time: one read
    assert all([(k.name, k.gpu_seconds) for k in s.keys] == [("team", 10)] for s in shown)
    store.close()  # reads now fail
    clock.advance(REFRESH)
    for _ in range(3):
        again = await book.charges_by_key(plane.storage, since, {"k1": "team"})
        assert [(k.name, k.gpu_seconds) for k in again.keys] == [("team", 10)]  # the last reading
    assert len(asked) == 2  # one failed try, not one per view
    clock.advance(REFRESH)
    await book.charges_by_key(plane.storage, since, {"k1": "team"})
    assert len(asked) == 3


async def test_views_while_the_store_has_been_out_since_start_show_no_charges(tmp_path: Path) -> None:
    clock = FakeClock()
    plane = plane_in(tmp_path, clock)
    plane.storage.store.close()  # out before the first read
    book = ChargeBook("EUR")
    for _ in range(2):  # the failed read, then a view before the next try
        shown = await book.charges_by_key(plane.storage, clock.now() - 3600, {})
        assert (shown.currency, shown.keys) == ("EUR", [])
