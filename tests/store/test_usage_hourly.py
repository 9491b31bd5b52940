"""The last day's usage per key and model comes from an hourly aggregate kept in the same transaction as the rows:
a page view or a scrape never scans the usage table, however many requests it holds."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from llmgw.store.base import UsageRecord
from llmgw.store.migrations import MIGRATIONS
from llmgw.store.sqlite import SqliteStore

H = 3600.0


def rec(key: str, t: float, p: int = 2, c: int = 3) -> UsageRecord:
    return UsageRecord(key_id=key, model="m", replica_id="r", prompt_tokens=p, completion_tokens=c, started_at=t,
                       duration_s=0.1, status=200)


def test_recent_usage_counts_from_the_hour_holding_since(tmp_path: Path) -> None:
    s = SqliteStore(tmp_path / "s.db").open()
    s.add_usage([rec("a", 10 * H + 5), rec("a", 11 * H + 1), rec("a", 11 * H + 2), rec("b", 12 * H)])
    s.add_usage([rec("a", 11 * H + 1)])  # another request in the same hour: the hour's row grows
    recent = {u.key_id: u for u in s.usage_recent(since=11 * H + 1800)}
    assert (recent["a"].requests, recent["a"].prompt_tokens, recent["a"].completion_tokens) == (3, 6, 9)
    assert recent["b"].requests == 1
    assert {u.key_id: u.requests for u in s.usage_recent(since=0)} == {"a": 4, "b": 1}
    assert s.usage_recent(since=13 * H) == []
    s.close()


def test_a_batch_sent_again_does_not_grow_the_hourly_aggregate(tmp_path: Path) -> None:
    s = SqliteStore(tmp_path / "s.db").open()
    batch = [rec("a", 5 * H), rec("a", 5 * H + 1)]
    assert s.add_usage(batch) == 2
    assert s.add_usage([*batch, rec("a", 5 * H + 2)]) == 1
    assert s.usage_recent(since=5 * H)[0].requests == 3
    s.close()


def test_the_hourly_aggregate_is_built_from_rows_a_previous_version_recorded(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    db = sqlite3.connect(path)
    for version, sql in enumerate(MIGRATIONS[:4], start=1):
        db.executescript(sql)
        db.execute(f"PRAGMA user_version={version}")
    db.executemany(
        "INSERT INTO usage (id, key_id, model, replica_id, prompt_tokens, completion_tokens, started_at, duration_s,"
        " status) VALUES (?, 'a', 'm', 'r', 1, 1, ?, 0, 200)", [(f"id{i:010d}", 7 * H + i) for i in range(5)])
    db.commit()
    db.close()
    s = SqliteStore(path).open()
    assert s.schema_version() == len(MIGRATIONS)
    assert s.usage_recent(since=7 * H)[0].requests == 5
    s.close()


def test_retention_drops_old_hours_and_keeps_all_time_totals(tmp_path: Path) -> None:
    s = SqliteStore(tmp_path / "s.db").open()
    s.add_usage([rec("a", 1 * H), rec("a", 3 * H)])
    s.prune(usage_before=2 * H, events_before=0.0)
    assert s.usage_recent(since=0)[0].requests == 1
    assert s.usage_totals()[0].requests == 2
    s.close()
