from __future__ import annotations

from pathlib import Path

from llmgw.store.base import ApiKeyRecord, UsageRecord
from llmgw.store.sqlite import SqliteStore


def test_wal_mode(tmp_path: Path) -> None:
    s = SqliteStore(tmp_path / "s.db").open()
    assert s.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    s.close()


def test_an_error_inside_a_transaction_rolls_it_back_and_later_writes_land(tmp_path: Path) -> None:
    """A count SQLite cannot bind (2^63) raises outside sqlite3.Error; the transaction must not stay open, or every
    later write goes into it, invisible to everyone else and lost at the next crash."""
    path = tmp_path / "s.db"
    s = SqliteStore(path).open()
    bad = UsageRecord.model_construct(
        key_id="k", model="m", replica_id="r", prompt_tokens=2**63, completion_tokens=1, started_at=1.0,
        duration_s=0.0, status=200, id="x" * 24,
    )
    try:
        s.add_usage([bad])
    except Exception:  # whatever it raises, it must not leave the transaction open
        pass
    key = ApiKeyRecord(id="k1", name="alice", prefix="llmgw-abc", hash="h1", created_at=0)
    s.put_key(key)
    other = SqliteStore(path).open()
    assert other.list_keys() == [key]
    other.put_key(key.model_copy(update={"id": "k2", "hash": "h2"}))  # and nobody is left holding the write lock
    assert other.usage_totals() == []
    s.close()
    other.close()




def test_a_usage_batch_is_written_in_a_few_statements_not_one_per_row(tmp_path: Path) -> None:
    """A usage batch goes in as a handful of statements, counted with SQLite's own trace, not one per row: per-row
    statements retake the GIL each time and are slow beside a busy thread (docs/benchmarks.md, SQLite usage batches)."""
    s = SqliteStore(tmp_path / "s.db").open()
    try:
        first = [UsageRecord(key_id="k", model="m", replica_id="r", prompt_tokens=1, completion_tokens=2,
                             started_at=1_800_000_000.123456 + i / 7, duration_s=0.01, status=200) for i in range(1200)]
        s.add_usage(first[:700])
        ran: list[str] = []
        s.db.set_trace_callback(ran.append)
        new = s.add_usage_new(first)  # 700 seen already: 500 new, found and written in one transaction
        s.db.set_trace_callback(None)
        assert [u.id for u in new] == [u.id for u in first[700:]]
        usage_statements = [q for q in ran if "usage (" in q or "FROM usage" in q]
        assert 1 <= len(usage_statements) <= 6, f"{len(usage_statements)} statements for a batch of 1,200"
        rows = s.db.execute("SELECT id, started_at FROM usage ORDER BY seq").fetchall()
        assert rows == [(u.id, u.started_at) for u in first]  # every one once, the times exactly as given
    finally:
        s.close()
