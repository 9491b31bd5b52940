"""The lease that says which control plane reconciles, and the fencing of its writes, on a SQLite file and on a real
PostgreSQL (two stores opened on the same database stand for two servers)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from llmgw.core.errors import Deposed
from llmgw.records.state import ReplicaRecord
from llmgw.store.sql import SqlStore

T0 = 1_800_000_000.0
TTL = 5.0


def replica(rid: str, model: str = "m") -> ReplicaRecord:
    return ReplicaRecord(id=rid, model=model, created_at=T0, shards_expected=1)


def test_one_holder_extends_and_another_takes_over_only_once_it_expired(opener: Callable[[], SqlStore]) -> None:
    a, b = opener(), opener()
    first = a.lead("a", None, T0, TTL)
    assert (first.holder, first.epoch, first.expires_at) == ("a", 1, T0 + TTL)
    assert b.lead("b", None, T0 + 1, TTL).holder == "a"  # held: left to its holder
    assert a.lead("a", 1, T0 + 4, TTL).expires_at == T0 + 4 + TTL  # extended
    assert b.lead("b", None, T0 + 8, TTL).holder == "a"  # 9 was when it ends
    taken = b.lead("b", None, T0 + 9.5, TTL)
    assert (taken.holder, taken.epoch) == ("b", 2)
    back = a.lead("a", 1, T0 + 10, TTL)  # the old holder, extending at its old epoch, is told who leads
    assert (back.holder, back.epoch) == ("b", 2)


def test_a_deposed_leaders_writes_are_refused_and_change_nothing(opener: Callable[[], SqlStore]) -> None:
    a, b = opener(), opener()
    a.lead("a", None, T0, TTL)
    a.put_replica(replica("r1"), epoch=1)
    assert b.lead("b", None, T0 + TTL + 1, TTL).epoch == 2  # a was paused past its lease
    with pytest.raises(Deposed):
        a.put_replica(replica("r1", model="written-by-a-deposed-leader"), epoch=1)
    with pytest.raises(Deposed):
        a.put_replica(replica("r2"), epoch=1)
    with pytest.raises(Deposed):
        a.delete_replica("r1", epoch=1)
    assert [(r.id, r.model) for r in b.list_replicas()] == [("r1", "m")]
    b.put_replica(replica("r2"), epoch=2)
    assert [r.id for r in a.list_replicas()] == ["r1", "r2"]


def test_a_released_lease_is_taken_at_once_and_force_takes_a_held_one(opener: Callable[[], SqlStore]) -> None:
    a, b = opener(), opener()
    a.lead("a", None, T0, TTL)
    a.release("a", 1)
    assert b.lead("b", None, T0 + 1, TTL).holder == "b"
    forced = a.lead("a2", None, T0 + 2, TTL, force=True)
    assert (forced.holder, forced.epoch) == ("a2", 3)


def test_servers_racing_for_an_expired_lease_elect_one(opener: Callable[[], SqlStore]) -> None:
    stores = [opener() for _ in range(4)]
    won: list[str] = []
    start = threading.Barrier(len(stores))

    def race(i: int) -> None:
        start.wait()
        for _ in range(20):
            lease = stores[i].lead(f"s{i}", None, T0, TTL)
            if lease.holder == f"s{i}":
                won.append(lease.holder)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(won) == 20 and len(set(won)) == 1  # one took it (then found it its own each time); nobody else
    assert stores[0].lead("x", None, T0, TTL).epoch == 1
