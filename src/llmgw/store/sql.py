"""The store over SQL, once for every database: records kept whole as JSON, usage rows with running totals per key
and model and per hour. The statements are written in the SQL both SQLite (3.35 on: RETURNING) and PostgreSQL
speak, with `?` for parameters; a subclass supplies the connection, its transactions, and how to insert only the
new usage rows. Every transaction commits whole or rolls back whole, whatever is raised inside it."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager

from pydantic import TypeAdapter, ValidationError

from llmgw.config.server import ModelSpec
from llmgw.core.errors import StoreError
from llmgw.records.state import Event, NodeRecord, ReplicaRecord
from llmgw.store.base import (
    IN_FLIGHT,
    AnyUsage,
    ApiKeyRecord,
    Lease,
    Renewals,
    Revocation,
    UsageTotal,
    hour_of,
    renewals_body,
    renewals_read,
    sum_by_hour,
)
from llmgw.store.chargeback_sql import ChargebackSql
from llmgw.store.tx import CATALOG, Row, Tx, _fence
from llmgw.wire.hub import Resolution

log = logging.getLogger(__name__)
PRUNE_BATCH = 5000  # rows per delete transaction: retention never holds the write lock for long


USAGE_COLUMNS = ("id", "key_id", "model", "replica_id", "prompt_tokens", "completion_tokens", "started_at",
                 "duration_s", "status")


def usage_values(u: AnyUsage) -> tuple[object, ...]:
    """A usage record's values in the order of USAGE_COLUMNS."""
    return (u.id, u.key_id, u.model, u.replica_id, u.prompt_tokens, u.completion_tokens, u.started_at, u.duration_s,
            u.status)


def once_each(records: Sequence[AnyUsage], new: Callable[[str], bool]) -> list[AnyUsage]:
    """The records whose id `new` says was not recorded before, the first of each id only: a record twice in one
    batch is inserted once, and counted once."""
    out: list[AnyUsage] = []
    taken: set[str] = set()
    for u in records:
        if u.id not in taken and new(u.id):
            taken.add(u.id)
            out.append(u)
    return out


def upsert(table: str, columns: tuple[str, ...], key: tuple[str, ...]) -> str:
    """INSERT, or on a key already there replace its other columns."""
    rest = [c for c in columns if c not in key]
    return (f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})"
            f" ON CONFLICT ({', '.join(key)}) DO UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in rest))


def _add_to(table: str, key: str) -> str:
    """Add a batch's sums to a running total row (made if new)."""
    cols = "key_id, model, hour, " if key == "hour" else "key_id, model, "
    n = 7 if key == "hour" else 6
    conflict = "hour, key_id, model" if key == "hour" else "key_id, model"
    return (f"INSERT INTO {table} ({cols}requests, prompt_tokens, completion_tokens, last_at)"
            f" VALUES ({', '.join('?' for _ in range(n))}) ON CONFLICT ({conflict}) DO UPDATE SET"
            f" requests = {table}.requests + excluded.requests,"
            f" prompt_tokens = {table}.prompt_tokens + excluded.prompt_tokens,"
            f" completion_tokens = {table}.completion_tokens + excluded.completion_tokens,"
            f" last_at = CASE WHEN excluded.last_at > {table}.last_at THEN excluded.last_at ELSE {table}.last_at END")


ADD_HOURLY = _add_to("usage_hourly", "hour")
ADD_TOTALS = _add_to("usage_totals", "key")


def _total(r: Row, at: int = 0) -> UsageTotal:
    return UsageTotal(key_id=str(r[at]), model=str(r[at + 1]), requests=int(r[at + 2]),
                      prompt_tokens=int(r[at + 3]), completion_tokens=int(r[at + 4]), last_at=float(r[at + 5]))


class SqlStore(ChargebackSql):
    """The Store operations over a subclass's `_tx`, `_rows` and `_insert_usage`."""

    def _tx(self) -> AbstractContextManager[Tx]:
        raise NotImplementedError

    def _rows(self, sql: str, args: Sequence[object] = ()) -> list[Row]:
        raise NotImplementedError

    def _insert_usage(self, tx: Tx, records: Sequence[AnyUsage]) -> list[AnyUsage]:
        """Insert the records whose id is new (once each, a batch sent twice included); those that were."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def schema_version(self) -> int:
        raise NotImplementedError

    def _exec(self, sql: str, args: Sequence[object] = ()) -> None:
        with self._tx() as tx:
            tx.run(sql, args)

    # nodes
    def put_node(self, node: NodeRecord) -> None:
        self.put_nodes([node])

    def put_nodes(self, nodes: list[NodeRecord]) -> None:
        with self._tx() as tx:
            rev = _bump(tx, "nodes")
            tx.run_many(upsert("nodes", ("id", "body", "rev"), ("id",)),
                        [(n.id, n.model_dump_json(), rev) for n in nodes])

    def nodes_since(self, rev: int) -> list[NodeRecord]:
        """Node records written after revision `rev`, in the order they were written."""
        rows = self._rows("SELECT body FROM nodes WHERE rev > ? ORDER BY rev", (rev,))
        out = []
        for (body,) in rows:
            try:
                out.append(NodeRecord.model_validate_json(str(body)))
            except ValidationError as e:  # written by a newer release (an upgrade under way): the others still count
                log.warning("a node record this release cannot read was skipped: %s", str(e).splitlines()[0])
        return out

    def revs(self) -> dict[str, int]:
        """The revision of nodes, replicas, keys and revocations: what changed since a reader last looked, in one
        small read."""
        return {str(r[0]): int(r[1]) for r in self._rows("SELECT name, n FROM revs")}

    def get_node(self, node_id: str) -> NodeRecord | None:
        rows = self._rows("SELECT body FROM nodes WHERE id = ?", (node_id,))
        return NodeRecord.model_validate_json(str(rows[0][0])) if rows else None

    def list_nodes(self) -> list[NodeRecord]:
        return [NodeRecord.model_validate_json(str(r[0])) for r in self._rows("SELECT body FROM nodes ORDER BY id")]

    # catalog
    def put_models(self, models: list[ModelSpec]) -> None:
        with self._tx() as tx:
            write_catalog(tx, models)

    def list_models(self) -> list[ModelSpec]:
        rows = self._rows("SELECT body FROM models ORDER BY position")
        return [ModelSpec.model_validate_json(str(r[0])) for r in rows]

    # replicas
    def put_replica(self, replica: ReplicaRecord, epoch: int | None = None) -> None:
        with self._tx() as tx:
            _fence(tx, epoch)
            tx.run(upsert("replicas", ("id", "model", "body", "rev"), ("id",)),
                   (replica.id, replica.model, replica.model_dump_json(), _bump(tx, "replicas")))

    def delete_replica(self, replica_id: str, epoch: int | None = None) -> None:
        with self._tx() as tx:
            _fence(tx, epoch)
            if tx.run("DELETE FROM replicas WHERE id = ?", (replica_id,)):
                _bump(tx, "replicas")

    def list_replicas(self) -> list[ReplicaRecord]:
        rows = self._rows("SELECT body FROM replicas ORDER BY id")
        return [ReplicaRecord.model_validate_json(str(r[0])) for r in rows]

    # leadership
    def lead(self, holder: str, epoch: int | None, now: float, ttl: float, force: bool = False) -> Lease:
        """Hold the lease: extended when `holder` has it at `epoch` (even past its expiry: nobody took it, so nobody
        wrote meanwhile), taken with the next epoch when it has expired (or `force`: the caller knows no other
        server can run, as a SQLite file's lock proves), else left to its holder. Each is one conditional UPDATE, so
        two servers trying at once cannot both succeed. Returns the lease as it now is."""
        with self._tx() as tx:
            if epoch is None or not tx.run(EXTEND, (now + ttl, holder, epoch)):
                tx.run(TAKE, (holder, now + ttl, math.inf if force else now))
        r = self._rows("SELECT holder, epoch, expires_at FROM leader WHERE id = 1")[0]
        return Lease(holder=str(r[0]), epoch=int(r[1]), expires_at=float(r[2]))

    def release(self, holder: str, epoch: int) -> None:
        """Give the lease up (a server stopping): another may take it at once instead of after it expires."""
        self._exec("UPDATE leader SET expires_at = 0 WHERE id = 1 AND holder = ? AND epoch = ?", (holder, epoch))

    # events
    def add_event(self, event: Event) -> None:
        self._exec("INSERT INTO events (at, body) VALUES (?, ?)", (event.at, event.model_dump_json()))

    def list_events(self, limit: int = 100) -> list[Event]:
        rows = self._rows("SELECT body FROM events ORDER BY seq DESC LIMIT ?", (limit,))
        return [Event.model_validate_json(str(r[0])) for r in reversed(rows)]

    # keys and usage
    def put_key(self, key: ApiKeyRecord) -> int:
        with self._tx() as tx:
            tx.run(upsert("api_keys", ("id", "hash", "body"), ("id",)), (key.id, key.hash, key.model_dump_json()))
            rev = _bump(tx, "keys")
        return rev

    def list_keys(self) -> list[ApiKeyRecord]:
        rows = self._rows("SELECT body FROM api_keys ORDER BY id")
        return [ApiKeyRecord.model_validate_json(str(r[0])) for r in rows]

    def add_usage(self, records: Sequence[AnyUsage]) -> int:
        """Record a batch in one transaction, each record at most once (by its id, so a batch sent twice counts
        once), and keep the totals per key and model in the same transaction. Returns how many were new."""
        return len(self.add_usage_new(records))

    def add_usage_new(self, records: Sequence[AnyUsage]) -> list[AnyUsage]:
        """add_usage, returning the records that were new (those anything counting usage elsewhere must add)."""
        marks = [r for r in records if r.status == IN_FLIGHT]  # requests still running: chargeback's, not usage
        if marks:
            records = [r for r in records if r.status != IN_FLIGHT]
        if not records and not marks:
            return []
        with self._tx() as tx:
            self._put_open(tx, marks)
            fresh = self._insert_usage(tx, records) if records else []
            hourly = sum_by_hour(fresh)
            added: dict[tuple[str, str], list[float]] = {}
            for (k, m, _), h in hourly.items():
                t = added.setdefault((k, m), [0, 0, 0, 0.0])
                t[0] += h[0]
                t[1] += h[1]
                t[2] += h[2]
                t[3] = max(t[3], h[3])
            tx.run_many(ADD_HOURLY, [(k, m, h, int(t[0]), int(t[1]), int(t[2]), t[3])
                                     for (k, m, h), t in sorted(hourly.items())])
            tx.run_many(ADD_TOTALS, [(k, m, int(t[0]), int(t[1]), int(t[2]), t[3])
                                     for (k, m), t in sorted(added.items())])
        return fresh

    def usage_totals(self, since: float = 0.0) -> list[UsageTotal]:
        """All-time totals come from the running aggregate (no scan); totals since a time scan that window."""
        if since <= 0:
            rows = self._rows("SELECT key_id, model, requests, prompt_tokens, completion_tokens, last_at"
                              " FROM usage_totals ORDER BY key_id, model")
        else:
            rows = self._rows(
                "SELECT key_id, model, COUNT(*), SUM(prompt_tokens), SUM(completion_tokens), MAX(started_at)"
                " FROM usage WHERE started_at >= ? GROUP BY key_id, model ORDER BY key_id, model", (since,))
        return [_total(r) for r in rows]

    def usage_recent(self, since: float) -> list[UsageTotal]:
        """Totals from the hour holding `since` on, per key and model, read from the hourly aggregate: the cost
        depends on keys, models and hours, never on how many requests there were."""
        rows = self._rows(
            "SELECT key_id, model, SUM(requests), SUM(prompt_tokens), SUM(completion_tokens), MAX(last_at)"
            " FROM usage_hourly WHERE hour >= ? GROUP BY key_id, model ORDER BY key_id, model", (hour_of(since),))
        return [_total(r) for r in rows]

    def usage_by_hour(self, since: float) -> list[tuple[int, UsageTotal]]:
        """The hourly aggregate's rows from the hour holding `since` on: (hour, totals of that hour)."""
        rows = self._rows(
            "SELECT hour, key_id, model, requests, prompt_tokens, completion_tokens, last_at FROM usage_hourly"
            " WHERE hour >= ? ORDER BY hour, key_id, model", (hour_of(since),))
        return [(int(r[0]), _total(r, 1)) for r in rows]

    def key_usage_by_hour(self, key_id: str, since: float, before: float) -> list[tuple[int, UsageTotal]]:
        """One key's rows of the hourly aggregate from the hour holding `since` to the one before `before` (what it
        may read of its own: bounded both ways, so no query walks every tenant's history)."""
        rows = self._rows(
            "SELECT hour, key_id, model, requests, prompt_tokens, completion_tokens, last_at FROM usage_hourly"
            " WHERE hour >= ? AND hour < ? AND key_id = ? ORDER BY hour, model",
            (hour_of(since), hour_of(before - 1e-6) + 1, key_id))
        return [(int(r[0]), _total(r, 1)) for r in rows]

    def usage_count(self) -> int:
        return int(self._rows("SELECT COUNT(*) FROM usage")[0][0])

    def prune(self, usage_before: float, events_before: float) -> tuple[int, int]:
        """Delete usage rows and events older than the given times, a batch per transaction. Totals are kept."""
        done = [0, 0]
        for i, (table, column, before) in enumerate(
            (("usage", "started_at", usage_before), ("events", "at", events_before))
        ):
            while True:
                with self._tx() as tx:
                    n = tx.run(f"DELETE FROM {table} WHERE seq IN (SELECT seq FROM {table} WHERE {column} < ?"
                               f" LIMIT ?)", (before, PRUNE_BATCH))
                done[i] += n
                if n < PRUNE_BATCH:
                    break
        self._exec("DELETE FROM usage_hourly WHERE hour < ?", (hour_of(usage_before),))  # a few rows per hour
        self.prune_charges(usage_before)
        self._exec("DELETE FROM activity WHERE at < ?", (events_before,))
        self._exec("DELETE FROM renewals WHERE at < ?", (events_before,))  # servers long gone
        return done[0], done[1]

    # what each server's routers saw (several servers on one store): (kind, name, at, n) per server
    def put_activity(self, server: str, rows: list[tuple[str, str, float, int]]) -> None:
        with self._tx() as tx:
            tx.run_many(upsert("activity", ("server", "kind", "name", "at", "n"), ("server", "kind", "name")),
                        [(server, k, name, at, n) for k, name, at, n in rows])

    def activity(self, since: float) -> list[tuple[str, str, str, float, int]]:
        """(server, kind, name, at, n) of every row written at or after `since`."""
        rows = self._rows("SELECT server, kind, name, at, n FROM activity WHERE at >= ? ORDER BY server, kind, name",
                          (since,))
        return [(str(a), str(b), str(c), float(d), int(e)) for a, b, c, d, e in rows]

    # when each server last heard, itself, the nodes that talk to it (several servers on one store)
    def put_renewals(self, server: str, at: float, heard: dict[str, float]) -> None:
        """This server's row, replaced whole: one statement whatever the number of nodes."""
        self._exec(upsert("renewals", ("server", "at", "heard"), ("server",)), (server, at, renewals_body(at, heard)))

    def renewals(self, since: float) -> list[Renewals]:
        """(server, at, node id -> when heard) of every row written after `since`; a row this release cannot read
        is skipped (a newer release's), the others still count."""
        out: list[Renewals] = []
        for server, at, body in self._rows("SELECT server, at, heard FROM renewals WHERE at > ? ORDER BY server",
                                           (since,)):
            heard = renewals_read(float(at), str(body))
            if heard is None:
                log.warning("renewals of server %s this release cannot read were skipped", server)
                continue
            out.append((str(server), float(at), heard))
        return out

    # node revocations
    def put_revocation(self, revocation: Revocation) -> None:
        r = revocation
        with self._tx() as tx:
            tx.run(upsert("revocations", ("node_id", "serial", "at", "reason"), ("node_id", "serial")),
                   (r.node_id, r.serial, r.at, r.reason))
            _bump(tx, "revocations")

    def list_revocations(self) -> list[Revocation]:
        rows = self._rows("SELECT node_id, serial, at, reason FROM revocations ORDER BY at")
        return [Revocation(node_id=str(a), serial=str(b), at=float(c), reason=str(d)) for a, b, c, d in rows]

    # hub models' resolutions, per source as the catalog names it (control/hub/hub_models.py)
    def get_resolution(self, source: str) -> Resolution | None:
        rows = self._rows("SELECT body FROM hub_resolutions WHERE source = ?", (source,))
        return _resolution(str(rows[0][0])) if rows else None

    def claim_resolution(self, source: str, resolution: Resolution) -> Resolution:
        """Keeps `resolution` unless one is there already; the one kept (another server's, when it was first)."""
        body = RESOLUTION.dump_json(resolution).decode()
        with self._tx() as tx:
            tx.run("INSERT INTO hub_resolutions (source, commit_id, body) VALUES (?, ?, ?)"
                   " ON CONFLICT (source) DO NOTHING", (source, resolution.commit, body))
            row = tx.one("SELECT body FROM hub_resolutions WHERE source = ?", (source,))
        return (_resolution(str(row[0])) if row else None) or resolution

    def drop_resolution(self, source: str, commit: str) -> None:
        """Forgets the source's resolution if it still names `commit` (another server may have replaced it)."""
        self._exec("DELETE FROM hub_resolutions WHERE source = ? AND commit_id = ?", (source, commit))


RESOLUTION = TypeAdapter(Resolution)


def _resolution(body: str) -> Resolution | None:
    """A stored resolution, or None when this release cannot read it (it is then resolved again)."""
    try:
        return RESOLUTION.validate_json(body)
    except ValidationError:
        log.warning("a hub resolution in the store is not readable by this release: resolving it again")
        return None


EXTEND = "UPDATE leader SET expires_at = ? WHERE id = 1 AND holder = ? AND epoch = ?"
TAKE = "UPDATE leader SET holder = ?, epoch = epoch + 1, expires_at = ? WHERE id = 1 AND expires_at < ?"


def write_catalog(tx: Tx, models: list[ModelSpec]) -> None:
    """The catalog replaced by `models`. Servers starting at once each write theirs: one after the other, each
    whole (interleaved, the second's insert of a name waited on the first's and then broke the unique name)."""
    tx.serialize(CATALOG)
    tx.run("DELETE FROM models")
    tx.run_many("INSERT INTO models (name, position, body) VALUES (?, ?, ?)",
                [(m.name, i, m.model_dump_json()) for i, m in enumerate(models)])


def _bump(tx: Tx, name: str) -> int:
    """The next revision of `name`, its counter's row locked until this transaction ends."""
    row = tx.one("UPDATE revs SET n = n + 1 WHERE name = ? RETURNING n", (name,))
    if row is None:
        raise StoreError(f"the store has no revision counter {name!r}: its schema is not this version's")
    return int(row[0])


def split(sql: str) -> Iterator[str]:
    """A migration's statements."""
    return (s for s in sql.split(";") if s.strip())
