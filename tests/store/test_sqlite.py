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
