"""Chargeback in the store (records/chargeback.py): replica spans, hourly charges and chargeback's mark, over
the SQL both SQLite and PostgreSQL speak (store/sql.py). One chargeback step (chargeback/) writes its charges, its
spans and the new mark in one fenced transaction: a window is charged whole, once, or not at all."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import AbstractContextManager

from pydantic import ValidationError

from llmgw.core.errors import AlreadyCharged
from llmgw.records.chargeback import ChargeRow, ReplicaSpan
from llmgw.store.base import UsageRecord, hour_of
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
                    epoch: int | None = None) -> None:
        """Add `rows` to the hourly charges, write `spans` whole and move the mark from `before` to `to`, in one
        transaction; AlreadyCharged (nothing written) when the mark is no longer `before`."""
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
            tx.run("DELETE FROM replica_spans WHERE ended_at IS NOT NULL AND ended_at < ? AND ended_at <"
                   " (SELECT accounted_to FROM chargeback_mark WHERE id = 1)", (before,))
