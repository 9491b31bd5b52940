"""The summary's usage comes from totals kept in memory as usage is recorded (no store read on a page view or a
scrape); they agree with the store's own aggregates, count a batch sent twice once, and survive a restart."""

from __future__ import annotations

from pathlib import Path

from llmgw.control.plane import ControlPlane
from llmgw.control.tenants.usage_totals import DAY
from llmgw.control.views.status import summary_of
from llmgw.store.base import UsageRecord
from tests.harness import plane_in

H = 3600.0


def recs(key: str, times: list[float]) -> list[UsageRecord]:
    return [UsageRecord(key_id=key, model="m", replica_id="r", prompt_tokens=2, completion_tokens=3, started_at=t,
                        duration_s=0.1, status=200) for t in times]


async def test_recorded_usage_is_in_the_summary_once_and_agrees_with_the_store(tmp_path: Path) -> None:
    p = plane_in(tmp_path)
    now = p.clock.now()
    batch = recs("k1", [now - 2 * DAY, now - 2 * H, now - 60]) + recs("k2", [now - 30])
    assert await p.activity.record_usage(batch) == 4
    assert await p.activity.record_usage(batch) == 0  # a report sent again
    s = await summary_of(p.status())
    by_key = {u.key_id: u for u in s.usage}
    assert (by_key["k1"].requests, by_key["k1"].day_requests, by_key["k1"].completion_tokens) == (3, 2, 9)
    assert (by_key["k2"].requests, by_key["k2"].day_requests) == (1, 1)
    assert p.usage.totals() == p.store.usage_totals()
    assert p.usage.recent(now - DAY) == p.store.usage_recent(now - DAY)


async def test_the_totals_are_read_back_from_the_store_aggregates_after_a_restart(tmp_path: Path) -> None:
    p = plane_in(tmp_path)
    now = p.clock.now()
    await p.activity.record_usage(recs("k1", [now - 3 * DAY, now - 5 * H, now - 10]))
    again = ControlPlane(p.cfg, p.store, p.clock)
    again.load()
    assert again.usage.totals() == p.usage.totals()
    assert again.usage.recent(now - DAY) == p.usage.recent(now - DAY)
    assert [u.requests for u in again.usage.recent(now - DAY)] == [2]


async def test_key_names_are_read_again_only_when_keys_change(tmp_path: Path) -> None:
    p = plane_in(tmp_path)
    assert p.credentials.key_names() is None  # never read
    assert p.credentials.refresh_key_names() == {}
    assert p.credentials.key_names() == {}
    _, rec = await p.credentials.create_key("alice", [])
    assert p.credentials.key_names() == {rec.id: "alice"}  # a key this plane wrote is known without reading the store
    await p.credentials.revoke_keys(lambda k: True)
    assert p.credentials.key_names() == {rec.id: "alice"}  # so is one it revoked
    p.credentials.keys_changed()  # as the follow pass hears of a change through another server
    assert p.credentials.key_names() is None  # changed otherwise: read again
    await summary_of(p.status())  # reads them again
    assert p.credentials.key_names() == {rec.id: "alice"}


def test_the_days_window_follows_new_records_and_rolls_by_the_hour() -> None:
    from llmgw.control.tenants.usage_totals import UsageTotals

    book = UsageTotals()
    t0 = 1000 * H
    book.add(recs("k", [t0 - 30 * H, t0 - 2 * H]))
    assert [u.requests for u in book.recent(t0 - DAY)] == [1]
    book.add(recs("k", [t0 - 10, t0 - 5]))  # arrive after the window was summed: counted in it
    assert [u.requests for u in book.recent(t0 - DAY)] == [3]
    assert [u.requests for u in book.recent(t0 - H)] == [2]  # a window from the last hour: t0 - 2h is not in it
    assert [u.requests for u in book.recent(t0 - 31 * H)] == [4]  # a wider window: summed again from the hours
    assert [u.requests for u in book.totals()] == [4]
