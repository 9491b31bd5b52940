"""SQLite (WAL) implementation of the store. Opening happens in open(), never in the constructor.

Two connections: one that writes and one that reads, each behind its own lock, so a read never waits behind a
write that waits for another process's lock. Every transaction commits whole or rolls back whole, whatever is
raised inside it (a number SQLite cannot bind included): a transaction left open would swallow every later write.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from llmgw.config.server import ModelSpec
from llmgw.core.errors import StoreError
from llmgw.core.state import Event, NodeRecord, ReplicaRecord
from llmgw.store.base import ApiKeyRecord, Revocation, UsageRecord, UsageTotal
from llmgw.store.migrations import MIGRATIONS

BUSY_TIMEOUT_MS = 5000
PRUNE_BATCH = 5000  # rows per delete transaction: retention never holds the write lock for long


def _private(path: str) -> None:
    """Create the database file 0600 (SQLite gives its -wal and -shm files the same mode), or make it so."""
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    for p in (path, path + "-wal", path + "-shm"):
        try:
            os.chmod(p, 0o600)
        except FileNotFoundError:
            pass


def hour_of(t: float) -> int:
    return int(t // 3600)


class _SomeSeen(Exception):
    """Raised inside a usage transaction to roll it back: some records of the batch are recorded already."""


class SqliteStore:
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
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: committed whole, or rolled back on anything raised, then re-raised as
        StoreError when it came from SQLite."""
        with self._wlock:
            db = self.db
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    yield db
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
            with self._tx() as db:
                for stmt in sql.split(";"):
                    if stmt.strip():
                        db.execute(stmt)
                db.execute(f"PRAGMA user_version={version}")

    def close(self) -> None:
        for db in {id(c): c for c in (self._r, self._w) if c is not None}.values():
            db.close()
        self._r = self._w = None

    def _exec(self, sql: str, args: tuple[object, ...] = ()) -> None:
        with self._tx() as db:
            db.execute(sql, args)

    def _rows(self, sql: str, args: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        try:
            with self._rlock:
                return list(self._reader.execute(sql, args).fetchall())
        except sqlite3.Error as e:
            raise StoreError(f"{self.path}: {e}") from e

    # nodes
    def put_node(self, node: NodeRecord) -> None:
        self._exec("INSERT OR REPLACE INTO nodes (id, body) VALUES (?, ?)", (node.id, node.model_dump_json()))

    def put_nodes(self, nodes: list[NodeRecord]) -> None:
        with self._tx() as db:
            db.executemany(
                "INSERT OR REPLACE INTO nodes (id, body) VALUES (?, ?)", [(n.id, n.model_dump_json()) for n in nodes]
            )

    def get_node(self, node_id: str) -> NodeRecord | None:
        rows = self._rows("SELECT body FROM nodes WHERE id = ?", (node_id,))
        return NodeRecord.model_validate_json(str(rows[0][0])) if rows else None

    def list_nodes(self) -> list[NodeRecord]:
        return [NodeRecord.model_validate_json(str(r[0])) for r in self._rows("SELECT body FROM nodes ORDER BY id")]

    # catalog
    def put_models(self, models: list[ModelSpec]) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM models")
            for i, m in enumerate(models):
                db.execute(
                    "INSERT INTO models (name, position, body) VALUES (?, ?, ?)", (m.name, i, m.model_dump_json())
                )

    def list_models(self) -> list[ModelSpec]:
        return [
            ModelSpec.model_validate_json(str(r[0])) for r in self._rows("SELECT body FROM models ORDER BY position")
        ]

    # replicas
    def put_replica(self, replica: ReplicaRecord) -> None:
        self._exec(
            "INSERT OR REPLACE INTO replicas (id, model, body) VALUES (?, ?, ?)",
            (replica.id, replica.model, replica.model_dump_json()),
        )

    def delete_replica(self, replica_id: str) -> None:
        self._exec("DELETE FROM replicas WHERE id = ?", (replica_id,))

    def list_replicas(self) -> list[ReplicaRecord]:
        rows = self._rows("SELECT body FROM replicas ORDER BY id")
        return [ReplicaRecord.model_validate_json(str(r[0])) for r in rows]

    # events
    def add_event(self, event: Event) -> None:
        self._exec("INSERT INTO events (at, body) VALUES (?, ?)", (event.at, event.model_dump_json()))

    def list_events(self, limit: int = 100) -> list[Event]:
        rows = self._rows("SELECT body FROM events ORDER BY seq DESC LIMIT ?", (limit,))
        return [Event.model_validate_json(str(r[0])) for r in reversed(rows)]

    # keys and usage
    def put_key(self, key: ApiKeyRecord) -> None:
        self._exec(
            "INSERT OR REPLACE INTO api_keys (id, hash, body) VALUES (?, ?, ?)",
            (key.id, key.hash, key.model_dump_json()),
        )

    def list_keys(self) -> list[ApiKeyRecord]:
        return [
            ApiKeyRecord.model_validate_json(str(r[0])) for r in self._rows("SELECT body FROM api_keys ORDER BY id")
        ]

    def add_usage(self, records: list[UsageRecord]) -> int:
        """Record a batch in one transaction, each record at most once (by its id, so a batch sent twice counts
        once), and keep the totals per key and model in the same transaction. Returns how many were new."""
        return len(self.add_usage_new(records))

    def add_usage_new(self, records: list[UsageRecord]) -> list[UsageRecord]:
        """add_usage, returning the records that were new (those anything counting usage elsewhere must add)."""
        if not records:
            return []
        try:
            return self._add_usage(records, each=False)
        except _SomeSeen:  # a retried or replayed batch: find out row by row which records are new
            return self._add_usage(records, each=True)

    def _add_usage(self, records: list[UsageRecord], each: bool) -> list[UsageRecord]:
        rows = [(u.id, u.key_id, u.model, u.replica_id, u.prompt_tokens, u.completion_tokens, u.started_at,
                 u.duration_s, u.status) for u in records]
        insert = ("INSERT OR IGNORE INTO usage (id, key_id, model, replica_id, prompt_tokens, completion_tokens,"
                  " started_at, duration_s, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")
        with self._tx() as db:
            if each:
                fresh = [u for u, row in zip(records, rows, strict=True) if db.execute(insert, row).rowcount == 1]
            else:
                before = db.total_changes
                db.executemany(insert, rows)  # the common case, at C speed: every record is new
                if db.total_changes - before != len(rows):
                    raise _SomeSeen
                fresh = records
            added: dict[tuple[str, str], list[float]] = {}
            hourly: dict[tuple[str, str, int], list[float]] = {}
            for u in fresh:
                for t in (added.setdefault((u.key_id, u.model), [0, 0, 0, 0.0]),
                          hourly.setdefault((u.key_id, u.model, hour_of(u.started_at)), [0, 0, 0, 0.0])):
                    t[0] += 1
                    t[1] += u.prompt_tokens
                    t[2] += u.completion_tokens
                    t[3] = max(t[3], u.started_at)
            db.executemany(
                "INSERT INTO usage_hourly (key_id, model, hour, requests, prompt_tokens, completion_tokens, last_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (hour, key_id, model) DO UPDATE SET"
                " requests = requests + excluded.requests, prompt_tokens = prompt_tokens + excluded.prompt_tokens,"
                " completion_tokens = completion_tokens + excluded.completion_tokens,"
                " last_at = MAX(last_at, excluded.last_at)",
                [(k, m, h, int(t[0]), int(t[1]), int(t[2]), t[3]) for (k, m, h), t in hourly.items()],
            )
            db.executemany(
                "INSERT INTO usage_totals (key_id, model, requests, prompt_tokens, completion_tokens, last_at)"
                " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (key_id, model) DO UPDATE SET"
                " requests = requests + excluded.requests, prompt_tokens = prompt_tokens + excluded.prompt_tokens,"
                " completion_tokens = completion_tokens + excluded.completion_tokens,"
                " last_at = MAX(last_at, excluded.last_at)",
                [(k, m, int(t[0]), int(t[1]), int(t[2]), t[3]) for (k, m), t in added.items()],
            )
        return fresh

    def usage_totals(self, since: float = 0.0) -> list[UsageTotal]:
        """All-time totals come from the running aggregate (no scan); totals since a time scan that window."""
        if since <= 0:
            rows = self._rows(
                "SELECT key_id, model, requests, prompt_tokens, completion_tokens, last_at FROM usage_totals"
                " ORDER BY key_id, model"
            )
        else:
            rows = self._rows(
                "SELECT key_id, model, COUNT(*), SUM(prompt_tokens), SUM(completion_tokens), MAX(started_at)"
                " FROM usage WHERE started_at >= ? GROUP BY key_id, model ORDER BY key_id, model",
                (since,),
            )
        return [
            UsageTotal(
                key_id=str(r[0]),
                model=str(r[1]),
                requests=int(str(r[2])),
                prompt_tokens=int(str(r[3])),
                completion_tokens=int(str(r[4])),
                last_at=float(str(r[5])),
            )
            for r in rows
        ]

    def usage_recent(self, since: float) -> list[UsageTotal]:
        """Totals from the hour holding `since` on, per key and model, read from the hourly aggregate: the cost
        depends on keys, models and hours, never on how many requests there were."""
        rows = self._rows(
            "SELECT key_id, model, SUM(requests), SUM(prompt_tokens), SUM(completion_tokens), MAX(last_at)"
            " FROM usage_hourly WHERE hour >= ? GROUP BY key_id, model ORDER BY key_id, model",
            (hour_of(since),),
        )
        return [
            UsageTotal(key_id=str(r[0]), model=str(r[1]), requests=int(str(r[2])), prompt_tokens=int(str(r[3])),
                       completion_tokens=int(str(r[4])), last_at=float(str(r[5])))
            for r in rows
        ]

    def usage_by_hour(self, since: float) -> list[tuple[int, UsageTotal]]:
        """The hourly aggregate's rows from the hour holding `since` on: (hour, totals of that hour)."""
        rows = self._rows(
            "SELECT hour, key_id, model, requests, prompt_tokens, completion_tokens, last_at FROM usage_hourly"
            " WHERE hour >= ? ORDER BY hour, key_id, model",
            (hour_of(since),),
        )
        return [
            (int(str(r[0])), UsageTotal(key_id=str(r[1]), model=str(r[2]), requests=int(str(r[3])),
                                        prompt_tokens=int(str(r[4])), completion_tokens=int(str(r[5])),
                                        last_at=float(str(r[6]))))
            for r in rows
        ]

    def usage_count(self) -> int:
        return int(str(self._rows("SELECT COUNT(*) FROM usage")[0][0]))

    def prune(self, usage_before: float, events_before: float) -> tuple[int, int]:
        """Delete usage rows and events older than the given times, a batch per transaction. Totals are kept."""
        done = [0, 0]
        for i, (table, column, before) in enumerate(
            (("usage", "started_at", usage_before), ("events", "at", events_before))
        ):
            while True:
                with self._tx() as db:
                    n = db.execute(
                        f"DELETE FROM {table} WHERE seq IN (SELECT seq FROM {table} WHERE {column} < ? LIMIT ?)",
                        (before, PRUNE_BATCH),
                    ).rowcount
                done[i] += n
                if n < PRUNE_BATCH:
                    break
        self._exec("DELETE FROM usage_hourly WHERE hour < ?", (hour_of(usage_before),))  # a few rows per hour
        return done[0], done[1]

    # node revocations
    def put_revocation(self, revocation: Revocation) -> None:
        r = revocation
        self._exec(
            "INSERT OR REPLACE INTO revocations (node_id, serial, at, reason) VALUES (?, ?, ?, ?)",
            (r.node_id, r.serial, r.at, r.reason),
        )

    def list_revocations(self) -> list[Revocation]:
        rows = self._rows("SELECT node_id, serial, at, reason FROM revocations ORDER BY at")
        return [Revocation(node_id=str(a), serial=str(b), at=float(str(c)), reason=str(d)) for a, b, c, d in rows]
