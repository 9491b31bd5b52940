"""A PostgreSQL store after its database restarted (a failover, an upgrade): the pool's connections were cut."""

from __future__ import annotations

from llmgw.store.postgres import PostgresStore
from tests.pg import PASSWORD, Postgres


def test_a_read_after_the_database_restarted_is_answered(postgres: Postgres) -> None:
    """A read on a pooled connection that the database's restart cut is answered on a fresh one, not failed (a 503
    on the management API) though the database is back."""
    store = PostgresStore(postgres.fresh_db(), PASSWORD).open()
    try:
        assert store.list_keys() == []  # the pool holds a connection now
        postgres.outage()
        postgres.back()
        for _ in range(3):  # every connection the pool kept: none fails a read
            assert store.list_keys() == []
    finally:
        store.close()
