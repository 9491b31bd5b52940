"""A server starting beside a leader misses a replica change that lands while it loads."""

from __future__ import annotations

from pathlib import Path

from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.core.state import ReplicaRecord
from llmgw.reconcile.intents import PutReplica
from llmgw.store.postgres import PostgresStore
from tests.control.conftest import config
from tests.pg import PASSWORD


def replica(rid: str, at: float) -> ReplicaRecord:
    return ReplicaRecord(id=rid, model="m", created_at=at, shards_expected=1, secret="s" * 64)


async def test_a_replica_written_while_a_server_loads_reaches_it(dsn: str, tmp_path: Path) -> None:
    """Found by an attack review.
    ControlPlane.load reads the replicas (list_replicas) and only afterwards the revisions (revs()),
    which it then takes as 'seen'. A leader's write committed between the two reads is in the revision but not in
    the replicas read, so follow_store never sees a change and the new server's router and agents miss the
    replica until the leader writes replicas again (hours, in a steady state). Reading revs() first (and
    following from there) would not miss it. The same gap exists for nodes (list_nodes ... revs())."""
    cfg, clock = config(dsn, tmp_path), FakeClock()
    a = ControlPlane(cfg, PostgresStore(dsn, PASSWORD).open(), clock)
    a.load()
    assert a.leadership.leading
    bstore = PostgresStore(dsn, PASSWORD).open()
    b = ControlPlane(cfg, bstore, clock)
    real = bstore.list_replicas

    def racing() -> list[ReplicaRecord]:
        got = real()
        if not any(r.id == "r1" for r in a.registry.replicas.values()):  # the leader's write lands just after this read
            a.registry.apply([PutReplica(replica("r1", clock.now()))])
        return got

    bstore.list_replicas = racing  # type: ignore[method-assign]
    try:
        b.load()
        assert not b.leadership.leading
        for _ in range(3):  # follower passes
            await b.following.follow_store()
            b.passes.reconcile_once()
        assert {r.id for r in bstore.list_replicas()} == {"r1"}
        held = b.registry.replicas
        assert set(held) == {"r1"}, f"the follower's replicas are {sorted(held)}; the store has r1"
    finally:
        a.store.close()
        bstore.close()
