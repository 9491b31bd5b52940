"""PostgreSQL implementation of the store (its operations: store/sql.py), through psycopg 3 and a small pool.

The password comes apart from the DSN (a file or an environment variable, store config), so it is in no message.
Migrations are versioned in `llmgw_schema` and run under a transaction-scoped advisory lock: several servers
starting at once migrate once, the others wait and find the work done.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from llmgw.core.errors import StoreError, StoreRejected
from llmgw.store.base import AnyUsage
from llmgw.store.chargeback_sql import CHARGEBACK, OPEN_USAGE
from llmgw.store.migrations import ACTIVITY, HUB_RESOLUTIONS, LEADER, RENEWALS, REVISIONS, REVOCATION_REVS
from llmgw.store.sql import USAGE_COLUMNS, SqlStore, once_each, split, usage_values
from llmgw.store.tx import Row

MIGRATE_LOCK = 7_331_001  # the advisory lock key migrations hold
CONNECT_TIMEOUT_S = 10
RECONNECT_EVERY_S = 2.0  # while the database is away, the pool tries to reach it at least this often

MIGRATIONS: list[str] = [
    # 1: the schema SQLite reached in its fifth migration, in PostgreSQL's types (times as double precision)
    """
    CREATE TABLE nodes (id TEXT PRIMARY KEY, body TEXT NOT NULL);
    CREATE TABLE models (name TEXT PRIMARY KEY, position INTEGER NOT NULL, body TEXT NOT NULL);
    CREATE TABLE replicas (id TEXT PRIMARY KEY, model TEXT NOT NULL, body TEXT NOT NULL);
    CREATE TABLE events (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, at DOUBLE PRECISION NOT NULL, body TEXT NOT NULL
    );
    CREATE INDEX events_at ON events (at);
    CREATE TABLE api_keys (id TEXT PRIMARY KEY, hash TEXT NOT NULL UNIQUE, body TEXT NOT NULL);
    CREATE TABLE usage (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, id TEXT UNIQUE,
        key_id TEXT NOT NULL, model TEXT NOT NULL, replica_id TEXT NOT NULL,
        prompt_tokens BIGINT NOT NULL, completion_tokens BIGINT NOT NULL,
        started_at DOUBLE PRECISION NOT NULL, duration_s DOUBLE PRECISION NOT NULL, status INTEGER NOT NULL
    );
    CREATE INDEX usage_started ON usage (started_at);
    CREATE TABLE revocations (
        node_id TEXT NOT NULL, serial TEXT NOT NULL, at DOUBLE PRECISION NOT NULL, reason TEXT NOT NULL,
        PRIMARY KEY (node_id, serial)
    );
    CREATE TABLE usage_totals (
        key_id TEXT NOT NULL, model TEXT NOT NULL, requests BIGINT NOT NULL, prompt_tokens BIGINT NOT NULL,
        completion_tokens BIGINT NOT NULL, last_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (key_id, model)
    );
    CREATE TABLE usage_hourly (
        key_id TEXT NOT NULL, model TEXT NOT NULL, hour BIGINT NOT NULL, requests BIGINT NOT NULL,
        prompt_tokens BIGINT NOT NULL, completion_tokens BIGINT NOT NULL, last_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (hour, key_id, model)
    );
    """,
    # 2: the lease one control plane holds to reconcile, and the fencing epoch its writes carry
    LEADER,
    # 3: revisions, so servers sharing the database read what the others changed, not everything
    REVISIONS,
    # 4: what each server's routers saw, for the leader
    ACTIVITY,
    # 5: revocations carry a revision too
    REVOCATION_REVS,
    # 6: hub models' resolutions, the first written kept
    HUB_RESOLUTIONS,
    # 7: when each server last heard the nodes that talk to it, one row per server
    RENEWALS,
    # 8: chargeback: replica spans, hourly charges, chargeback's mark
    CHARGEBACK,
    # 9: requests marked in flight, each request's GPU-seconds
    OPEN_USAGE,
]

INSERT_NEW_USAGE = (
    "INSERT INTO usage (id, key_id, model, replica_id, prompt_tokens, completion_tokens, started_at, duration_s,"
    " status) SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::bigint[], %s::bigint[],"
    " %s::float8[], %s::float8[], %s::int[]) ON CONFLICT (id) DO NOTHING RETURNING id"
)


def _pg(sql: str) -> str:
    """The shared statements' `?` parameters as psycopg's `%s` (they hold no literal `?` or `%`)."""
    return sql.replace("?", "%s")


class _PgTx:
    def __init__(self, cur: psycopg.Cursor[Row]) -> None:
        self.cur = cur

    def run(self, sql: str, args: Sequence[object] = ()) -> int:
        self.cur.execute(_pg(sql), tuple(args))
        return self.cur.rowcount

    def run_many(self, sql: str, rows: list[Sequence[object]]) -> None:
        if rows:
            self.cur.executemany(_pg(sql), rows)

    def serialize(self, key: int) -> None:
        """A transaction-scoped advisory lock: READ COMMITTED takes a snapshot per statement, so what follows it
        sees every write of the transaction that held the lock before."""
        self.cur.execute("SELECT pg_advisory_xact_lock(%s)", (key,))

    def one(self, sql: str, args: Sequence[object] = ()) -> Row | None:
        self.cur.execute(_pg(sql), tuple(args))
        return self.cur.fetchone()


class PostgresStore(SqlStore):
    def __init__(self, dsn: str, password: str = "", pool_size: int = 4) -> None:
        self.dsn = dsn
        self._password = password
        self._size = pool_size
        self._pool: ConnectionPool | None = None
        self.where = _where(dsn)

    def open(self) -> PostgresStore:
        kwargs: dict[str, object] = {"connect_timeout": CONNECT_TIMEOUT_S}
        if self._password:
            kwargs["password"] = self._password
        try:
            # one connection first: its failure says why (a pool retries and says only that it timed out)
            psycopg.connect(self.dsn, **kwargs).close()  # type: ignore[arg-type]
            self._pool = ConnectionPool(self.dsn, kwargs=kwargs, min_size=1, max_size=self._size,
                                        timeout=CONNECT_TIMEOUT_S, reconnect_timeout=RECONNECT_EVERY_S,
                                        reconnect_failed=_try_again, open=False)
            self._pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
            self._migrate()
        except (psycopg.Error, PoolTimeout) as e:
            self.close()
            raise StoreError(f"{self.where}: {_words(e)}") from None
        return self

    @property
    def pool(self) -> ConnectionPool:
        if self._pool is None:
            raise StoreError("store used before open()")
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    @contextmanager
    def _tx(self) -> Iterator[_PgTx]:
        """One transaction: committed whole, or rolled back on anything raised (then re-raised, as StoreError when
        it came from the database)."""
        try:
            with self.pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
                yield _PgTx(cur)
        except (psycopg.DataError, psycopg.IntegrityError) as e:  # the write itself, not the database's state
            raise StoreRejected(f"{self.where}: {_words(e)}") from None
        except (psycopg.Error, PoolTimeout) as e:
            raise StoreError(f"{self.where}: {_words(e)}") from None

    def _rows(self, sql: str, args: Sequence[object] = ()) -> list[Row]:
        """A read. One on a pooled connection the server has cut since (a restart, a failover) is read again on
        another: the pool keeps connections idle without looking at them, and a read changes nothing."""
        for attempt in range(self._size + 1):
            conn: psycopg.Connection[Row] | None = None
            try:
                with self.pool.connection() as conn:
                    return list(conn.execute(_pg(sql), tuple(args)).fetchall())
            except psycopg.OperationalError as e:
                if conn is not None and conn.broken and attempt < self._size:
                    continue  # the pool drops a broken connection as it takes it back
                raise StoreError(f"{self.where}: {_words(e)}") from None
            except (psycopg.Error, PoolTimeout) as e:
                raise StoreError(f"{self.where}: {_words(e)}") from None
        raise AssertionError("unreachable")

    def _insert_usage(self, tx: _PgTx, records: Sequence[AnyUsage]) -> list[AnyUsage]:  # type: ignore[override]
        """One statement for the batch; the ids it returns are those that were new (a batch sent twice counts
        once)."""
        rows = [usage_values(u) for u in records]
        cols = [[row[i] for row in rows] for i in range(len(USAGE_COLUMNS))]  # one array per column
        tx.cur.execute(INSERT_NEW_USAGE, cols)
        new = {str(r[0]) for r in tx.cur.fetchall()}
        return once_each(records, new.__contains__)

    def schema_version(self) -> int:
        return int(self._rows("SELECT COALESCE(MAX(version), 0) FROM llmgw_schema")[0][0])

    def _migrate(self) -> None:
        with self._tx() as tx:
            tx.cur.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATE_LOCK,))
            tx.cur.execute("CREATE TABLE IF NOT EXISTS llmgw_schema (version INTEGER PRIMARY KEY, at TIMESTAMPTZ"
                           " NOT NULL DEFAULT now())")
            tx.cur.execute("SELECT COALESCE(MAX(version), 0) FROM llmgw_schema")
            row = tx.cur.fetchone()
            current = int(row[0]) if row else 0
            for version, sql in enumerate(MIGRATIONS, start=1):
                if version <= current:
                    continue
                for stmt in split(sql):
                    tx.cur.execute(stmt)
                tx.cur.execute("INSERT INTO llmgw_schema (version) VALUES (%s)", (version,))


def _try_again(pool: ConnectionPool) -> None:
    """The pool gave up a series of tries to connect (after RECONNECT_EVERY_S): a new series begins at once. Left
    to itself, a series doubles its wait after each failed try (for 5 minutes), so a database back after an
    outage of T seconds was reached again up to T seconds later; short series keep the tries about 1 s apart."""
    if not pool.closed:
        pool.check()  # an empty pool (psycopg_pool 3.1.5 on) or one short of a connection starts a new series


def _where(dsn: str) -> str:
    """Where the database is, for messages: host, port and database, never the rest of the DSN."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return "postgres (an unreadable DSN)"
    return f"postgres {info.get('host', 'localhost')}:{info.get('port', 5432)}/{info.get('dbname', '')}"


def _words(e: Exception) -> str:
    return " ".join(str(e).split())[:500] or type(e).__name__
