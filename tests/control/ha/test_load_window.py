"""A server starting beside a leader misses a replica change that lands while it loads."""

from __future__ import annotations

from pathlib import Path

from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.reconcile.intents import Add
from llmgw.records.state import ReplicaRecord
from llmgw.store.postgres import PostgresStore
from tests.control.ha.conftest import config
from tests.pg import PASSWORD


async def test_a_replica_written_while_a_server_loads_reaches_it(dsn: str, tmp_path: Path) -> None:
    """A replica a leader writes between a loading server's read of the replicas and its read of the revisions still
    reaches that server."""
    cfg, clock = config(dsn, tmp_path), FakeClock()
    a = ControlPlane(cfg, PostgresStore(dsn, PASSWORD).open(), clock)
    a.load()
    assert a.leadership.leading
    bstore = PostgresStore(dsn, PASSWORD).open()
    b = ControlPlane(cfg, bstore, clock)
    real = bstore.list_replicas

    def racing() -> list[ReplicaRecord]:
        got = real()
        if not any(r.id == "r1" for r in a.registry.replicas.values()):  # the leader's write lands after this read
            a.registry.apply([Add("r1", "m", 1, "s" * 64)])
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
