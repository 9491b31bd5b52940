from __future__ import annotations

from pathlib import Path

from llmgw.store.base import ApiKeyRecord, UsageRecord
from llmgw.store.sqlite import SqliteStore


def test_wal_mode(tmp_path: Path) -> None:
    s = SqliteStore(tmp_path / "s.db").open()
    assert s.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    s.close()


def test_an_error_inside_a_transaction_rolls_it_back_and_later_writes_land(tmp_path: Path) -> None:
    """The defect: a count SQLite cannot bind (2^63) raised outside sqlite3.Error, the transaction stayed open, and
    every later write went into it, invisible to everyone else and lost at the next crash."""
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


