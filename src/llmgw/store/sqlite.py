"""SQLite (WAL) implementation of the store. Opening happens in open(), never in the constructor."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from llmgw.config.server import ModelSpec
from llmgw.core.errors import StoreError
from llmgw.core.state import Event, NodeRecord, ReplicaRecord
from llmgw.store.base import ApiKeyRecord, Revocation, UsageRecord, UsageTotal
from llmgw.store.migrations import MIGRATIONS


class SqliteStore:
    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._db: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def open(self) -> SqliteStore:
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA busy_timeout=5000")
            self._db = db
            self._migrate()
        except sqlite3.Error as e:
            raise StoreError(f"{self.path}: {e}") from e
        return self

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise StoreError("store used before open()")
        return self._db

    def schema_version(self) -> int:
        return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self) -> None:
        current = self.schema_version()
        for version, sql in enumerate(MIGRATIONS, start=1):
            if version <= current:
                continue
            with self._lock:
                self.db.execute("BEGIN IMMEDIATE")
                try:
                    for stmt in sql.split(";"):
                        if stmt.strip():
                            self.db.execute(stmt)
                    self.db.execute(f"PRAGMA user_version={version}")
                    self.db.execute("COMMIT")
                except sqlite3.Error:
                    self.db.execute("ROLLBACK")
                    raise

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def _exec(self, sql: str, args: tuple[object, ...] = ()) -> None:
        try:
            with self._lock:
                self.db.execute(sql, args)
        except sqlite3.Error as e:
            raise StoreError(f"{self.path}: {e}") from e

    def _rows(self, sql: str, args: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        try:
            with self._lock:
                return list(self.db.execute(sql, args).fetchall())
        except sqlite3.Error as e:
            raise StoreError(f"{self.path}: {e}") from e

    # nodes
    def put_node(self, node: NodeRecord) -> None:
        self._exec("INSERT OR REPLACE INTO nodes (id, body) VALUES (?, ?)", (node.id, node.model_dump_json()))

    def get_node(self, node_id: str) -> NodeRecord | None:
        rows = self._rows("SELECT body FROM nodes WHERE id = ?", (node_id,))
        return NodeRecord.model_validate_json(str(rows[0][0])) if rows else None

    def list_nodes(self) -> list[NodeRecord]:
        return [NodeRecord.model_validate_json(str(r[0])) for r in self._rows("SELECT body FROM nodes ORDER BY id")]

    # catalog
    def put_models(self, models: list[ModelSpec]) -> None:
        try:
            with self._lock:
                self.db.execute("BEGIN IMMEDIATE")
                self.db.execute("DELETE FROM models")
                for i, m in enumerate(models):
                    self.db.execute(
                        "INSERT INTO models (name, position, body) VALUES (?, ?, ?)", (m.name, i, m.model_dump_json())
                    )
                self.db.execute("COMMIT")
        except sqlite3.Error as e:
            raise StoreError(f"{self.path}: {e}") from e

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

    def add_usage(self, records: list[UsageRecord]) -> None:
        if not records:
            return
        try:
            with self._lock:
                # one transaction for the batch: in autocommit each row would be its own commit
                self.db.execute("BEGIN IMMEDIATE")
                try:
                    self.db.executemany(
                        "INSERT INTO usage (key_id, model, replica_id, prompt_tokens, completion_tokens, started_at,"
                        " duration_s, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        [
                            (
                                u.key_id,
                                u.model,
                                u.replica_id,
                                u.prompt_tokens,
                                u.completion_tokens,
                                u.started_at,
                                u.duration_s,
                                u.status,
                            )
                            for u in records
                        ],
                    )
                    self.db.execute("COMMIT")
                except sqlite3.Error:
                    self.db.execute("ROLLBACK")
                    raise
        except sqlite3.Error as e:
            raise StoreError(f"{self.path}: {e}") from e

    def usage_totals(self, since: float = 0.0) -> list[UsageTotal]:
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
