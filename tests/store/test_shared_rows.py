"""What servers sharing a store read of each other, and writes the database refuses: a node record a newer release
wrote is skipped, not a failed pass; a value PostgreSQL cannot hold is refused once, and later writes still land."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from llmgw.control.storage.writer import StoreWriter
from llmgw.core.clock import SystemClock
from llmgw.core.errors import StoreError, StoreRejected
from llmgw.store.base import Revocation
from llmgw.store.postgres import PostgresStore
from llmgw.store.sql import SqlStore
from tests.clusters import node
from tests.harness import wait_until
from tests.pg import PASSWORD, Postgres


def test_a_node_record_this_release_cannot_read_is_skipped(opener: Callable[[], SqlStore]) -> None:
    s = opener()
    s.put_nodes([node("n1"), node("n2")])
    s._exec("UPDATE nodes SET body = ? WHERE id = ?", ('{"id": "n2", "field_of_a_newer_release": 1}', "n2"))
    assert [n.id for n in s.nodes_since(0)] == ["n1"]


def test_a_value_postgres_cannot_hold_is_refused_once_and_later_writes_land(postgres: Postgres) -> None:
    s = PostgresStore(postgres.fresh_db(), PASSWORD).open()
    writer = StoreWriter(SystemClock())
    try:
        bad = Revocation(node_id="n\x00", at=time.time(), reason="a NUL byte")
        with pytest.raises(StoreRejected) as e:
            s.put_revocation(bad)
        assert not isinstance(e.value, StoreError)  # not retried as if the database were away
        writer.submit(s.put_revocation, bad)
        writer.submit(s.put_revocation, Revocation(node_id="n1", at=time.time()))
        wait_until(lambda: [r.node_id for r in s.list_revocations()] == ["n1"], 10, "the write after it landed")
    finally:
        writer.close()
        s.close()
