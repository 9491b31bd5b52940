"""SQLite (WAL) implementation of the store (its operations: store/sql.py), opened in open(), never the constructor.

A writing and a reading connection, each behind its own lock, so a read never waits behind a write that waits for
another process's lock. Every transaction commits or rolls back whole, whatever is raised inside it (a number SQLite
cannot bind included): a transaction left open would swallow every later write.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from llmgw.core.errors import StoreError
from llmgw.store.base import AnyUsage
from llmgw.store.migrations import MIGRATIONS
from llmgw.store.sql import USAGE_COLUMNS, SqlStore, once_each, split, usage_values
from llmgw.store.tx import Row

BUSY_TIMEOUT_MS = 5000


def _private(path: str) -> None:
    """Create the database file 0600 (SQLite gives its -wal and -shm files the same mode), or make it so."""
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    for p in (path, path + "-wal", path + "-shm"):
        try:
            os.chmod(p, 0o600)
        except FileNotFoundError:
            pass


class SqliteStore(SqlStore):
    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._w: sqlite3.Connection | None = None
        self._r: sqlite3.Connection | None = None
        self._wlock = threading.Lock()
        self._rlock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        return db

    def open(self) -> SqliteStore:
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
                _private(self.path)  # it holds replicas' engine secrets: the owner's alone
            self._w = self._connect()
            self._migrate()
            # an in-memory database exists once per connection: there, reads share the writer's
            self._r = self._w if self.path == ":memory:" else self._connect()
        except sqlite3.Error as e:
            raise StoreError(f"{self.path}: {e}") from e
        return self

    @property
    def db(self) -> sqlite3.Connection:
        if self._w is None:
            raise StoreError("store used before open()")
        return self._w

    @property
    def _reader(self) -> sqlite3.Connection:
        if self._r is None:
            raise StoreError("store used before open()")
        return self._r

    def schema_version(self) -> int:
        return int(self._reader.execute("PRAGMA user_version").fetchone()[0])

    @contextmanager
    def _tx(self) -> Iterator[_SqliteTx]:
        """One write transaction: committed whole, or rolled back on anything raised, then re-raised as
        StoreError when it came from SQLite."""
        with self._wlock:
            db = self.db
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    yield _SqliteTx(db)
                    db.execute("COMMIT")
                except BaseException:
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                    raise
            except sqlite3.Error as e:
                raise StoreError(f"{self.path}: {e}") from e

    def _migrate(self) -> None:
        current = int(self.db.execute("PRAGMA user_version").fetchone()[0])
        for version, sql in enumerate(MIGRATIONS, start=1):
            if version <= current:
                continue
            with self._tx() as tx:
                for stmt in split(sql):
                    tx.run(stmt)
                tx.run(f"PRAGMA user_version={version}")

    def close(self) -> None:
        for db in {id(c): c for c in (self._r, self._w) if c is not None}.values():
            db.close()
        self._r = self._w = None

    def _rows(self, sql: str, args: Sequence[object] = ()) -> list[Row]:
        try:
            with self._rlock:
                return list(self._reader.execute(sql, tuple(args)).fetchall())
        except sqlite3.Error as e:
            raise StoreError(f"{self.path}: {e}") from e

    def _insert_usage(self, tx: _SqliteTx, records: Sequence[AnyUsage]) -> list[AnyUsage]:  # type: ignore[override]
        """Insert the records whose id is new and return them. The batch's ids already recorded are looked up
        first, in the same transaction; the new rows then go in USAGE_ROWS_PER_STATEMENT at a time.

        Never one statement per row (executemany): Python's sqlite3 lets go of the GIL around each row's step and
        must win it back for the next, which beside a busy thread waits up to the switch interval each time
        (figures: docs/benchmarks.md, "usage inserts")."""
        width = len(USAGE_COLUMNS)
        per_statement = max(1, min(USAGE_ROWS_PER_STATEMENT,
                                   tx.db.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // width))
        ids = [u.id for u in records]
        seen: set[str] = set()
        for i in range(0, len(ids), per_statement * width):
            part = ids[i : i + per_statement * width]
            seen.update(str(r[0]) for r in tx.db.execute(
                f"SELECT id FROM usage WHERE id IN ({','.join('?' * len(part))})", part))
        fresh = once_each(records, lambda i: i not in seen)
        for i in range(0, len(fresh), per_statement):
            part_rows = fresh[i : i + per_statement]
            values = [v for u in part_rows for v in usage_values(u)]
            tx.db.execute(INSERT_USAGE + ", ".join([USAGE_ROW] * len(part_rows)), values)
        return fresh


USAGE_ROWS_PER_STATEMENT = 500
USAGE_ROW = "(" + ", ".join("?" * len(USAGE_COLUMNS)) + ")"
INSERT_USAGE = f"INSERT INTO usage ({', '.join(USAGE_COLUMNS)}) VALUES "


class _SqliteTx:
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def run(self, sql: str, args: Sequence[object] = ()) -> int:
        return self.db.execute(sql, tuple(args)).rowcount

    def run_many(self, sql: str, rows: list[Sequence[object]]) -> None:
        self.db.executemany(sql, rows)

    def serialize(self, key: int) -> None:
        """Nothing to do: a write transaction here began with BEGIN IMMEDIATE, which one connection holds at a time."""

    def one(self, sql: str, args: Sequence[object] = ()) -> Row | None:
        row: Row | None = self.db.execute(sql, tuple(args)).fetchone()
        return row
