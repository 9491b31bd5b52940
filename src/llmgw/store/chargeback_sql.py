"""Chargeback in the store (records/chargeback.py): replica spans, hourly charges and chargeback's mark, over
the SQL both SQLite and PostgreSQL speak (store/sql.py). One chargeback step (chargeback/) writes its charges, its
spans and the new mark in one fenced transaction: a window is charged whole, once, or not at all."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager

from pydantic import ValidationError

from llmgw.core.errors import AlreadyCharged
from llmgw.records.chargeback import ChargeRow, ReplicaSpan
from llmgw.store.base import IN_FLIGHT, AnyUsage, UsageRecord, hour_of
from llmgw.store.tx import Row, Tx, _fence

# SQLite's 12th migration and PostgreSQL's 8th
CHARGEBACK = """
    CREATE TABLE replica_spans (id TEXT PRIMARY KEY, ended_at DOUBLE PRECISION, body TEXT NOT NULL);
    CREATE INDEX replica_spans_ended ON replica_spans (ended_at);
    CREATE TABLE chargeback_hourly (
        hour BIGINT NOT NULL, key_id TEXT NOT NULL, model TEXT NOT NULL, gpu_class TEXT NOT NULL,
        busy_s DOUBLE PRECISION NOT NULL, load_s DOUBLE PRECISION NOT NULL, idle_s DOUBLE PRECISION NOT NULL,
        cost DOUBLE PRECISION NOT NULL, PRIMARY KEY (hour, key_id, model, gpu_class)
    );
    CREATE TABLE chargeback_mark (id INTEGER PRIMARY KEY, accounted_to DOUBLE PRECISION NOT NULL);
    INSERT INTO chargeback_mark (id, accounted_to) VALUES (1, 0);
    """

ADD_CHARGES = (
    "INSERT INTO chargeback_hourly (hour, key_id, model, gpu_class, busy_s, load_s, idle_s, cost)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (hour, key_id, model, gpu_class) DO UPDATE SET"
    " busy_s = chargeback_hourly.busy_s + excluded.busy_s, load_s = chargeback_hourly.load_s + excluded.load_s,"
    " idle_s = chargeback_hourly.idle_s + excluded.idle_s, cost = chargeback_hourly.cost + excluded.cost"
)
PUT_SPAN = ("INSERT INTO replica_spans (id, ended_at, body) VALUES (?, ?, ?) ON CONFLICT (id) DO UPDATE SET"
            " ended_at = excluded.ended_at, body = excluded.body")
# the hour pruned charges are summed into, per key, model and class: what a `total` GPU budget still counts (no
# report reads it: they read from hours of their own time on)
PRUNED_HOUR = -1
KEEP_PRUNED = (
    "INSERT INTO chargeback_hourly (hour, key_id, model, gpu_class, busy_s, load_s, idle_s, cost)"
    " SELECT ?, key_id, model, gpu_class, SUM(busy_s), SUM(load_s), SUM(idle_s), SUM(cost) FROM chargeback_hourly"
    " WHERE hour >= 0 AND hour < ? GROUP BY key_id, model, gpu_class" + ADD_CHARGES[ADD_CHARGES.index(" ON CONFLICT"):]
)
# SQLite's 13th migration and PostgreSQL's 9th: requests still in flight after a while, as their routers mark them
# (router/usage_journal.py), so that chargeback charges them in the windows that settle while they run; and each
# request's GPU-seconds as chargeback charged them, window by window
OPEN_USAGE = """
    CREATE TABLE usage_open (
        id TEXT PRIMARY KEY, key_id TEXT NOT NULL, model TEXT NOT NULL, replica_id TEXT NOT NULL,
        started_at DOUBLE PRECISION NOT NULL, seen_at DOUBLE PRECISION NOT NULL,
        gpu_s DOUBLE PRECISION NOT NULL DEFAULT 0
    );
    ALTER TABLE usage ADD COLUMN gpu_s DOUBLE PRECISION NOT NULL DEFAULT 0;
    """
PUT_OPEN = ("INSERT INTO usage_open (id, key_id, model, replica_id, started_at, seen_at) VALUES (?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (id) DO UPDATE SET replica_id = excluded.replica_id,"
            " seen_at = CASE WHEN excluded.seen_at > usage_open.seen_at THEN excluded.seen_at ELSE usage_open.seen_at"
            " END")
OPEN_READ = ("SELECT o.id, o.key_id, o.model, o.replica_id, o.started_at, o.seen_at, u.id, u.replica_id,"
             " u.prompt_tokens, u.completion_tokens, u.started_at, u.duration_s, u.status FROM usage_open o"
             " LEFT JOIN usage u ON u.id = o.id WHERE o.started_at < ? ORDER BY o.started_at")
log = logging.getLogger(__name__)
USAGE_READ = ("SELECT id, key_id, model, replica_id, prompt_tokens, completion_tokens, started_at, duration_s, status,"
              " seq FROM usage WHERE started_at >= ? AND started_at < ? ORDER BY started_at")


class ChargebackSql:
    """The chargeback operations of SqlStore (its `_tx`, `_rows` and `_fence`)."""

    def _tx(self) -> AbstractContextManager[Tx]:
        raise NotImplementedError

    def _rows(self, sql: str, args: Sequence[object] = ()) -> list[Row]:
        raise NotImplementedError

    def charge_mark(self) -> float:
        """The time before which GPU time is charged (0: never charged)."""
        return float(self._rows("SELECT accounted_to FROM chargeback_mark WHERE id = 1")[0][0])

    def put_charges(self, rows: Sequence[ChargeRow], spans: Sequence[ReplicaSpan], before: float, to: float,
                    epoch: int | None = None, shares: Mapping[str, float] | None = None,
                    closed: Sequence[str] = ()) -> None:
        """Add `rows` to the hourly charges, write `spans` whole, add `shares` (request id: GPU-seconds) to their
        usage rows, forget the marks of requests in flight `closed`, and move the mark from `before` to `to`, in
        one transaction; AlreadyCharged (nothing written) when the mark is no longer `before`."""
        with self._tx() as tx:
            _fence(tx, epoch)
            if not tx.run("UPDATE chargeback_mark SET accounted_to = ? WHERE id = 1 AND accounted_to = ?",
                          (to, before)):
                raise AlreadyCharged(f"GPU time before {before} was charged by another step")
            if rows:
                tx.run_many(ADD_CHARGES, [(r.hour, r.key_id, r.model, r.gpu_class, r.busy_s, r.load_s, r.idle_s,
                                           r.cost) for r in rows])
            if spans:
                tx.run_many(PUT_SPAN, [(s.id, s.ended_at, s.model_dump_json()) for s in spans])
            if shares:  # to the request's usage row, or while it has none (in flight) to its mark
                tx.run_many("UPDATE usage SET gpu_s = gpu_s + ? WHERE id = ?",
                            [(gs, rid) for rid, gs in sorted(shares.items())])
                tx.run_many("UPDATE usage_open SET gpu_s = gpu_s + ? WHERE id = ? AND NOT EXISTS"
                            " (SELECT 1 FROM usage WHERE usage.id = usage_open.id)",
                            [(gs, rid) for rid, gs in sorted(shares.items())])
            if closed:  # what a mark was charged goes to its usage row, if it landed
                tx.run_many("UPDATE usage SET gpu_s = gpu_s + (SELECT o.gpu_s FROM usage_open o WHERE o.id = ?)"
                            " WHERE id = ? AND EXISTS (SELECT 1 FROM usage_open o WHERE o.id = ?)",
                            [(rid, rid, rid) for rid in closed])
                tx.run_many("DELETE FROM usage_open WHERE id = ?", [(rid,) for rid in closed])

    def _put_open(self, tx: Tx, marks: Sequence[AnyUsage]) -> None:
        """Requests in flight, as their routers mark them (status IN_FLIGHT, in flight for duration_s so far)."""
        tx.run_many(PUT_OPEN, [(r.id, r.key_id, r.model, r.replica_id, r.started_at, r.started_at + r.duration_s)
                               for r in marks])

    def open_usage(self, before: float) -> list[UsageRecord]:
        """Requests marked in flight that started before `before`: each one's usage row where it has landed, else
        its mark as a record of status IN_FLIGHT, with no tokens, in flight until it was last seen."""
        out = []
        for r in self._rows(OPEN_READ, (before,)):
            try:
                if r[6] is not None:
                    out.append(UsageRecord(id=str(r[0]), key_id=str(r[1]), model=str(r[2]), replica_id=str(r[7]),
                                           prompt_tokens=int(r[8]), completion_tokens=int(r[9]),
                                           started_at=float(r[10]), duration_s=float(r[11]), status=int(r[12])))
                else:
                    out.append(UsageRecord(id=str(r[0]), key_id=str(r[1]), model=str(r[2]), replica_id=str(r[3]),
                                           prompt_tokens=0, completion_tokens=0, started_at=float(r[4]),
                                           duration_s=max(0.0, float(r[5]) - float(r[4])), status=IN_FLIGHT))
            except ValidationError:
                log.warning("usage: request %r marked in flight has times no request has: not charged", r[0])
        return out

    def usage_requests(self, since: float, before: float, limit: int) -> list[tuple[UsageRecord, float]]:
        """Requests started in [since, before), oldest first, at most `limit`, each with its GPU-seconds charged so
        far (the per-request export)."""
        rows = self._rows("SELECT u.id, u.key_id, u.model, u.replica_id, u.prompt_tokens, u.completion_tokens,"
                          " u.started_at, u.duration_s, u.status, u.seq, u.gpu_s + COALESCE(o.gpu_s, 0) FROM usage u"
                          " LEFT JOIN usage_open o ON o.id = u.id WHERE u.started_at >= ? AND u.started_at < ?"
                          " ORDER BY u.started_at, u.seq LIMIT ?", (since, before, limit))
        return [(UsageRecord.model_construct(
            id=str(r[0]) if r[0] is not None else f"usage-row-{r[9]}", key_id=str(r[1]), model=str(r[2]),
            replica_id=str(r[3]), prompt_tokens=int(r[4]), completion_tokens=int(r[5]), started_at=float(r[6]),
            duration_s=float(r[7]), status=int(r[8])), float(r[10])) for r in rows]

    def open_spans(self, ended_since: float) -> list[ReplicaSpan]:
        """Spans alive, or ended at or after `ended_since`."""
        rows = self._rows("SELECT body FROM replica_spans WHERE ended_at IS NULL OR ended_at >= ?", (ended_since,))
        return [ReplicaSpan.model_validate_json(str(r[0])) for r in rows]

    def charges_since(self, since: float) -> list[ChargeRow]:
        """The hourly charges from the hour holding `since` on."""
        rows = self._rows("SELECT hour, key_id, model, gpu_class, busy_s, load_s, idle_s, cost FROM chargeback_hourly"
                          " WHERE hour >= ? ORDER BY hour, key_id, model, gpu_class", (max(0, hour_of(since)),))
        return [ChargeRow(hour=int(r[0]), key_id=str(r[1]), model=str(r[2]), gpu_class=str(r[3]), busy_s=float(r[4]),
                          load_s=float(r[5]), idle_s=float(r[6]), cost=float(r[7])) for r in rows]

    def key_charges_since(self, key_id: str, since: float, before: float) -> list[ChargeRow]:
        """One key's hourly charges from the hour holding `since` to the one before `before`."""
        rows = self._rows("SELECT hour, key_id, model, gpu_class, busy_s, load_s, idle_s, cost FROM chargeback_hourly"
                          " WHERE hour >= ? AND hour < ? AND key_id = ? ORDER BY hour, model, gpu_class",
                          (max(0, hour_of(since)), hour_of(before - 1e-6) + 1, key_id))
        return [ChargeRow(hour=int(r[0]), key_id=str(r[1]), model=str(r[2]), gpu_class=str(r[3]), busy_s=float(r[4]),
                          load_s=float(r[5]), idle_s=float(r[6]), cost=float(r[7])) for r in rows]

    def charges_by_key_model(self, since: float) -> list[ChargeRow]:
        """The hourly charges from the hour holding `since` on, summed per key and model (hours and GPU classes
        together: each row's hour the first one's, its class "*"): a per-key view reads one row per key and model,
        not one per hour."""
        rows = self._rows("SELECT key_id, model, SUM(busy_s), SUM(load_s), SUM(idle_s), SUM(cost) FROM"
                          " chargeback_hourly WHERE hour >= ? GROUP BY key_id, model ORDER BY key_id, model",
                          (hour_of(since),))
        # sums of validated rows, which may pass a single row's bounds over a long period: not validated again
        return [ChargeRow.model_construct(hour=hour_of(since), key_id=str(r[0]), model=str(r[1]), gpu_class="*",
                                          busy_s=float(r[2]), load_s=float(r[3]), idle_s=float(r[4]),
                                          cost=float(r[5])) for r in rows]

    def usage_started(self, since: float, before: float) -> list[UsageRecord]:
        """The usage rows of requests started in [since, before), oldest first. A row an older release wrote without
        an id is named by its sequence number; one no request can have written (times out of bounds) is left out
        and logged, so that it cannot stop the charging of every window after it."""
        out, bad = [], 0
        for r in self._rows(USAGE_READ, (since, before)):
            try:
                out.append(UsageRecord(id=str(r[0]) if r[0] is not None else f"usage-row-{r[9]}", key_id=str(r[1]),
                                       model=str(r[2]), replica_id=str(r[3]), prompt_tokens=int(r[4]),
                                       completion_tokens=int(r[5]), started_at=float(r[6]), duration_s=float(r[7]),
                                       status=int(r[8])))
            except ValidationError:
                bad += 1
        if bad:
            log.warning("usage: %d row(s) started in [%s, %s) have times no request has: not charged", bad, since,
                        before)
        return out

    def pruned_charges(self) -> list[ChargeRow]:
        """What pruning took of the hourly charges, summed per key, model and class, as rows of hour 0 (1970: before
        any budget's day or month, in its total)."""
        rows = self._rows("SELECT 0, key_id, model, gpu_class, busy_s, load_s, idle_s, cost FROM chargeback_hourly"
                          " WHERE hour = ?", (PRUNED_HOUR,))
        return [ChargeRow(hour=int(r[0]), key_id=str(r[1]), model=str(r[2]), gpu_class=str(r[3]), busy_s=float(r[4]),
                          load_s=float(r[5]), idle_s=float(r[6]), cost=float(r[7])) for r in rows]

    def prune_charges(self, before: float) -> None:
        """Hourly charges before the hour holding `before` (summed into PRUNED_HOUR first: `total` budgets count
        them), and spans that ended before it and before the mark (a span ended after the mark still has GPU time
        to charge, whatever the retention)."""
        with self._tx() as tx:
            tx.run(KEEP_PRUNED, (PRUNED_HOUR, hour_of(before)))
            tx.run("DELETE FROM chargeback_hourly WHERE hour >= 0 AND hour < ?", (hour_of(before),))
            tx.run("DELETE FROM usage_open WHERE seen_at < ?", (before,))  # marks no chargeback came to close
            tx.run("DELETE FROM replica_spans WHERE ended_at IS NOT NULL AND ended_at < ? AND ended_at <"
                   " (SELECT accounted_to FROM chargeback_mark WHERE id = 1)", (before,))
