"""A PostgreSQL store after its database restarted (a failover, an upgrade): the pool's connections were cut."""

from __future__ import annotations

import time

from llmgw.store.postgres import RECONNECT_EVERY_S, PostgresStore
from tests.harness import wait_until
from tests.pg import PASSWORD, Postgres

# Long enough for a back-off that doubles (tries 1, 2 and 4 s apart) to be 8 s from its next try at the end.
OUTAGE_S = 8.0
SLACK_S = 1.0  # a new connection's own time (authentication) on a loaded machine


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


def test_the_store_is_used_again_soon_after_a_long_outage(postgres: Postgres) -> None:
    """However long the database was away, a read is answered within RECONNECT_EVERY_S of its return: the pool keeps
    trying that often, rather than ever more rarely (doubling its wait, it reached the database again as late as the
    outage had lasted)."""
    store = PostgresStore(postgres.fresh_db(), PASSWORD).open()
    try:
        assert store.list_keys() == []
        postgres.outage()
        try:
            store.pool.check()  # the cut connection found now: the pool's tries begin here
            began = time.monotonic()

            def away_long_and_tried() -> bool:
                tries = store.pool.get_stats().get("connections_errors", 0)
                return time.monotonic() - began >= OUTAGE_S and tries >= 2

            wait_until(away_long_and_tried, OUTAGE_S + 10, f"{OUTAGE_S:.0f}s of the pool failing to reconnect")
        finally:
            postgres.back()
        back = time.monotonic()
        assert store.list_keys() == []  # waits for the pool's next connection (up to its 10 s timeout)
        took = time.monotonic() - back
        assert took <= RECONNECT_EVERY_S + SLACK_S, f"a read answered {took:.1f}s after the database was back"
    finally:
        store.close()
