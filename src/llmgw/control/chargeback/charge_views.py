"""GPU time and its cost beside the token counts in the usage views (the management API's /api/usage and its hourly
CSV, `ctl usage`, the dashboard), from the charges the leader's chargeback keeps per hour, key, model and GPU class
(records/chargeback.py). The operator's share (key OPERATOR) is a row of its own, named OPERATOR_NAME; GPU time
nobody's tokens went with (a load nobody used, idle time) has its row too."""

from __future__ import annotations

import csv
import datetime as dt
import io
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from llmgw.records.chargeback import OPERATOR, ChargeRow
from llmgw.store.base import UsageRecord, UsageTotal

OPERATOR_NAME = "(operator)"  # shown where a key's name would be: the management API refuses it as a key's name
GPU_FIELDS = ("gpu_seconds", "busy_s", "load_s", "idle_s", "cost")
TOKEN_FIELDS = ("requests", "prompt_tokens", "completion_tokens")
CSV_HEAD = ["hour_utc", "key_id", "key_name", "model", *TOKEN_FIELDS, *GPU_FIELDS, "currency"]


def name_of(key_id: str, names: Mapping[str, str]) -> str:
    return OPERATOR_NAME if key_id == OPERATOR else names.get(key_id, "")


def _blank() -> dict[str, Any]:
    return {**dict.fromkeys(TOKEN_FIELDS, 0), **dict.fromkeys(GPU_FIELDS, 0.0)}


def _add_tokens(into: dict[str, Any], t: UsageTotal) -> None:
    into["requests"] += t.requests
    into["prompt_tokens"] += t.prompt_tokens
    into["completion_tokens"] += t.completion_tokens


def _add_charge(into: dict[str, Any], c: ChargeRow) -> None:
    into["busy_s"] += c.busy_s
    into["load_s"] += c.load_s
    into["idle_s"] += c.idle_s
    into["gpu_seconds"] += c.gpu_s
    into["cost"] += c.cost


def _key_order(key_id: str) -> tuple[bool, str]:
    return key_id == OPERATOR, key_id  # the operator's row last


def usage_rows(totals: Iterable[UsageTotal], charges: Iterable[ChargeRow], by: str,
               names: Mapping[str, str]) -> list[dict[str, Any]]:
    """One row per key (with its name) or per model: requests and tokens, GPU-seconds by what the GPUs did, and
    their cost, summed over the period's hours (and over models, or keys and the operator's share)."""
    rows: dict[str, dict[str, Any]] = {}

    def row(k: str) -> dict[str, Any]:
        r = rows.get(k)
        if r is None:
            r = rows[k] = {by: k, **({"name": name_of(k, names)} if by == "key" else {}), **_blank()}
        return r

    for t in totals:
        _add_tokens(row(t.key_id if by == "key" else t.model), t)
    for c in charges:
        _add_charge(row(c.key_id if by == "key" else c.model), c)
    return [rows[k] for k in sorted(rows, key=_key_order)]


class KeyCharge(BaseModel):
    """One key's (or the operator's: key_id OPERATOR) GPU-seconds and their cost over a period."""

    key_id: str
    name: str = ""
    gpu_seconds: float = 0.0
    busy_s: float = 0.0
    load_s: float = 0.0
    idle_s: float = 0.0
    cost: float = 0.0


class ChargesByKey(BaseModel):
    """GPU time and cost per key over a period, the operator's share last."""

    currency: str = ""
    keys: list[KeyCharge] = []


def by_key(charges: Iterable[ChargeRow], names: Mapping[str, str], currency: str) -> ChargesByKey:
    """Per key, every model, GPU class and hour summed."""
    rows = usage_rows((), charges, "key", names)
    return ChargesByKey(currency=currency, keys=[KeyCharge(key_id=r["key"], name=r["name"],
                                                      **{f: r[f] for f in GPU_FIELDS}) for r in rows])


def hourly_rows(by_hour: Iterable[tuple[int, UsageTotal]],
                charges: Iterable[ChargeRow]) -> list[tuple[int, str, str, dict[str, Any]]]:
    """(hour, key, model, its figures) for every hour, key and model with tokens or GPU time (GPU classes
    summed), by hour, then key (the operator last), then model."""
    rows: dict[tuple[int, str, str], dict[str, Any]] = {}
    for hour, t in by_hour:
        _add_tokens(rows.setdefault((hour, t.key_id, t.model), _blank()), t)
    for c in charges:
        _add_charge(rows.setdefault((c.hour, c.key_id, c.model), _blank()), c)
    order = sorted(rows, key=lambda hkm: (hkm[0], *_key_order(hkm[1]), hkm[2]))
    return [(h, k, m, rows[(h, k, m)]) for h, k, m in order]


def usage_csv(by_hour: Iterable[tuple[int, UsageTotal]], charges: Iterable[ChargeRow], names: Mapping[str, str],
              currency: str) -> str:
    """The hourly usage as RFC 4180 CSV with a header row: what an invoice is made from."""
    out = io.StringIO()
    w = csv.writer(out, quoting=csv.QUOTE_ALL)  # separators and quotes inside a cell stay in it
    w.writerow(CSV_HEAD)
    for hour, key_id, model, f in hourly_rows(by_hour, charges):
        w.writerow([iso_hour(hour), key_id, spreadsheet_cell(name_of(key_id, names)), spreadsheet_cell(model),
                    *(f[n] for n in TOKEN_FIELDS), *(f"{f[n]:.3f}" for n in GPU_FIELDS[:4]), f"{f['cost']:.6f}",
                    currency])
    return out.getvalue()


REQUESTS_HEAD = ["started_utc", "request_id", "key_id", "key_name", "model", "replica_id", "status", "prompt_tokens",
                 "completion_tokens", "duration_s", "gpu_seconds"]


def requests_csv(rows: Iterable[tuple[UsageRecord, float]], names: Mapping[str, str]) -> str:
    """Each request with the GPU-seconds chargeback charged it so far (its busy share, window by window: a
    request's windows are charged settle_after after they end), as RFC 4180 CSV with a header row."""
    out = io.StringIO()
    w = csv.writer(out, quoting=csv.QUOTE_ALL)
    w.writerow(REQUESTS_HEAD)
    for r, gpu_s in rows:
        started = dt.datetime.fromtimestamp(r.started_at, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        w.writerow([started, r.id, r.key_id, spreadsheet_cell(name_of(r.key_id, names)), spreadsheet_cell(r.model),
                    spreadsheet_cell(r.replica_id), r.status, r.prompt_tokens, r.completion_tokens,
                    f"{r.duration_s:.3f}", f"{gpu_s:.3f}"])
    return out.getvalue()


def iso_hour(hour: int) -> str:
    return dt.datetime.fromtimestamp(hour * 3600, tz=dt.UTC).strftime("%Y-%m-%dT%H:00:00Z")


def spreadsheet_cell(text: str) -> str:
    """A cell a spreadsheet will not run as a formula (a key named "=HYPERLINK(...)")."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text
