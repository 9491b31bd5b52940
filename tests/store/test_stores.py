"""What every store does, on SQLite and on a real PostgreSQL alike."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from llmgw.core.errors import StoreError
from llmgw.records.state import Event, ReplicaRecord, ShardAssignment
from llmgw.store.base import ApiKeyRecord, Revocation, UsageRecord
from llmgw.store.postgres import MIGRATIONS as PG_MIGRATIONS
from llmgw.store.postgres import PostgresStore
from llmgw.store.sql import SqlStore
from llmgw.store.sqlite import SqliteStore
from tests.clusters import model, node
from tests.pg import PASSWORD, Postgres

Opener = Callable[[], SqlStore]


def use(key: str, t: float, p: int = 2, c: int = 3, model_: str = "m") -> UsageRecord:
    return UsageRecord(key_id=key, model=model_, replica_id="r", prompt_tokens=p, completion_tokens=c, started_at=t,
                       duration_s=0.1, status=200)


def test_records_survive_reopening(opener: Opener) -> None:
    s = opener()
    s.put_node(node("n1", fabric="ib-a"))
    s.put_node(node("n1", fabric="ib-b"))  # written again: replaced
    s.put_models([model("a"), model("b")])
    r = ReplicaRecord(id="a-1", model="a", created_at=1.0, shards_expected=1,
                      assignments=[ShardAssignment(rank=0, node_id="n1", address="10.0.0.1", gpus=[0, 1])])
    s.put_replica(r)
    s.add_event(Event(at=1.0, kind="node", subject="n1", message="hello"))
    s.add_event(Event(at=2.0, kind="node", subject="n1", message="again"))
    key = ApiKeyRecord(id="k1", name="alice", prefix="llmgw-abc", hash="h1", created_at=0)
    s.put_key(key)
    s.put_revocation(Revocation(node_id="n9", serial="", at=3.0, reason="stolen"))
    s.close()

    s2 = opener()
    assert [n.id for n in s2.list_nodes()] == ["n1"]
    assert s2.list_nodes()[0].report.fabrics[0].name == "ib-b"
    assert s2.get_node("n1") is not None and s2.get_node("n2") is None
    assert [m.name for m in s2.list_models()] == ["a", "b"]
    assert s2.list_replicas() == [r]
    assert [e.message for e in s2.list_events()] == ["hello", "again"]
    assert [e.message for e in s2.list_events(limit=1)] == ["again"]
    assert s2.list_keys() == [key]
    assert s2.list_revocations() == [Revocation(node_id="n9", serial="", at=3.0, reason="stolen")]
    s2.delete_replica("a-1")
    assert s2.list_replicas() == []


def test_usage_counts_once_keeps_totals_and_hours_and_outlives_retention(opener: Opener) -> None:
    s = opener()
    h = 1_800_000_000.0 // 3600 * 3600
    recs = [use("k", h + 1), use("k", h + 2), use("k", h + 3601, model_="n")]
    assert s.add_usage(recs[:2]) == 2
    assert [u.id for u in s.add_usage_new(recs)] == [recs[2].id]  # a retried batch: only the new one counts
    totals = {t.model: t for t in s.usage_totals()}
    assert (totals["m"].requests, totals["m"].prompt_tokens, totals["m"].completion_tokens) == (2, 4, 6)
    assert totals["m"].last_at == h + 2 and totals["n"].requests == 1
    assert [t.model for t in s.usage_totals(since=h + 3000)] == ["n"]
    assert {t.model: t.requests for t in s.usage_recent(since=h + 1800)} == {"m": 2, "n": 1}  # from its hour
    assert [(hour, t.model) for hour, t in s.usage_by_hour(0)] == [(int(h // 3600), "m"), (int(h // 3600) + 1, "n")]
    assert s.usage_count() == 3
    assert s.prune(usage_before=h + 3601, events_before=0.0) == (2, 0)
    assert s.usage_count() == 1 and {t.model: t.requests for t in s.usage_totals()} == {"m": 2, "n": 1}
    assert [t.model for t in s.usage_recent(since=0)] == ["n"]  # the hours before retention go too


def test_an_error_inside_a_transaction_rolls_it_back_and_later_writes_land(opener: Opener) -> None:
    s = opener()
    bad = UsageRecord.model_construct(key_id="k", model="m", replica_id="r", prompt_tokens=2**63,
                                      completion_tokens=1, started_at=1.0, duration_s=0.0, status=200, id="x" * 24)
    with pytest.raises(Exception):  # noqa: B017 - whatever each database raises, nothing may be left open
        s.add_usage([use("k", 1.0), bad])
    assert s.usage_count() == 0 and s.usage_totals() == []  # the good record of the batch went with it
    key = ApiKeyRecord(id="k1", name="alice", prefix="llmgw-abc", hash="h1", created_at=0)
    s.put_key(key)
    other = opener()
    assert other.list_keys() == [key]


def test_postgres_migrates_once_when_several_servers_start_at_once(postgres: Postgres) -> None:
    dsn = postgres.fresh_db()
    opened: list[SqlStore] = []
    errors: list[BaseException] = []

    def start() -> None:
        try:
            opened.append(PostgresStore(dsn, PASSWORD).open())
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert errors == [] and len(opened) == 4
        assert {s.schema_version() for s in opened} == {len(PG_MIGRATIONS)}
        opened[0].put_node(node("n1"))
        assert [n.id for n in opened[3].list_nodes()] == ["n1"]  # one database, seen by every server
    finally:
        for s in opened:
            s.close()


def test_a_wrong_password_is_a_store_error_that_does_not_say_the_password(postgres: Postgres) -> None:
    with pytest.raises(StoreError) as e:
        PostgresStore(postgres.dsn(), "not-" + PASSWORD).open()
    assert "password authentication failed" in str(e.value) and PASSWORD not in str(e.value)
    assert str(e.value).startswith(f"postgres 127.0.0.1:{postgres.port}/postgres")


def test_sqlite_and_postgres_are_both_stores(tmp_path: Path, postgres: Postgres) -> None:
    for s in (SqliteStore(tmp_path / "s.db").open(), PostgresStore(postgres.fresh_db(), PASSWORD).open()):
        assert isinstance(s, SqlStore) and s.schema_version() >= 1
        s.close()


def test_a_record_twice_in_one_batch_counts_once_and_large_batches_land_whole(opener: Opener) -> None:
    s = opener()
    recs = [use("k", 1_800_000_000.0 + i / 3) for i in range(1300)]
    new = s.add_usage_new([*recs[:5], recs[0], *recs[5:600]])
    assert [u.id for u in new] == [u.id for u in recs[:600]]
    assert [u.id for u in s.add_usage_new(recs)] == [u.id for u in recs[600:]]  # across several statements
    assert s.usage_count() == 1300
    (t,) = s.usage_totals()
    assert (t.requests, t.prompt_tokens, t.completion_tokens, t.last_at) == (1300, 2600, 3900, recs[-1].started_at)
