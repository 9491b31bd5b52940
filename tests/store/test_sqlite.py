from __future__ import annotations

from pathlib import Path

from llmgw.core.state import Event, ReplicaRecord, ShardAssignment
from llmgw.store.base import ApiKeyRecord, UsageRecord
from llmgw.store.migrations import MIGRATIONS
from llmgw.store.sqlite import SqliteStore
from tests.clusters import model, node


def test_records_survive_reopening(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    s = SqliteStore(path).open()
    s.put_node(node("n1", fabric="ib-a"))
    s.put_models([model("a"), model("b")])
    r = ReplicaRecord(
        id="a-1",
        model="a",
        created_at=1.0,
        shards_expected=1,
        assignments=[ShardAssignment(rank=0, node_id="n1", address="10.0.0.1", gpus=[0, 1])],
    )
    s.put_replica(r)
    s.add_event(Event(at=1.0, kind="node", subject="n1", message="hello"))
    s.close()

    s2 = SqliteStore(path).open()
    assert [n.id for n in s2.list_nodes()] == ["n1"]
    assert s2.list_nodes()[0].report.fabrics[0].name == "ib-a"
    assert [m.name for m in s2.list_models()] == ["a", "b"]
    assert s2.list_replicas() == [r]
    assert s2.list_events()[0].message == "hello"
    assert s2.schema_version() == len(MIGRATIONS)
    s2.delete_replica("a-1")
    assert s2.list_replicas() == []
    s2.close()


def test_wal_mode(tmp_path: Path) -> None:
    s = SqliteStore(tmp_path / "s.db").open()
    assert s.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    s.close()


def test_usage_totals_per_key_and_model(tmp_path: Path) -> None:
    s = SqliteStore(tmp_path / "s.db").open()
    s.put_key(ApiKeyRecord(id="k1", name="alice", prefix="llmgw-abc", hash="h1", created_at=0))
    recs = [
        UsageRecord(
            key_id="k1",
            model="a",
            replica_id="r",
            prompt_tokens=3,
            completion_tokens=5,
            started_at=t,
            duration_s=0.1,
            status=200,
        )
        for t in (10.0, 20.0)
    ]
    s.add_usage(recs)
    totals = s.usage_totals()
    assert len(totals) == 1
    assert (totals[0].requests, totals[0].prompt_tokens, totals[0].completion_tokens) == (2, 6, 10)
    assert totals[0].last_at == 20.0
    assert s.usage_totals(since=15.0)[0].requests == 1
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


def test_a_usage_record_sent_twice_counts_once_and_totals_need_no_scan(tmp_path: Path) -> None:
    s = SqliteStore(tmp_path / "s.db").open()
    recs = [UsageRecord(key_id="k", model="m", replica_id="r", prompt_tokens=2, completion_tokens=3, started_at=t,
                        duration_s=0.1, status=200) for t in (1.0, 2.0, 3.0)]
    assert s.add_usage(recs[:2]) == 2
    assert s.add_usage(recs) == 1  # a retried batch: only the new one counts
    t = s.usage_totals()[0]
    assert (t.requests, t.prompt_tokens, t.completion_tokens, t.last_at) == (3, 6, 9, 3.0)
    assert s.usage_count() == 3
    assert s.prune(usage_before=2.5, events_before=0.0) == (2, 0)
    assert s.usage_count() == 1 and s.usage_totals()[0].requests == 3  # totals outlive retention
    s.close()
