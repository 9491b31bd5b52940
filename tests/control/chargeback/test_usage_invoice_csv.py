"""The hourly usage CSV an invoice is made from (control/chargeback/charge_views.py usage_csv, pure): hours in UTC,
one row per hour, key and model with the operator last in its hour, every cell quoted, and names a spreadsheet
would run as a formula written as text."""

from __future__ import annotations

import calendar
import csv
import io
import time
from collections.abc import Iterator

import pytest

from llmgw.control.chargeback.charge_views import CSV_HEAD, OPERATOR_NAME, spreadsheet_cell, usage_csv
from llmgw.records.chargeback import OPERATOR, ChargeRow
from llmgw.store.base import UsageTotal

H = int(calendar.timegm((2026, 12, 15, 13, 0, 0)) // 3600)


def total(key: str, model: str) -> UsageTotal:
    return UsageTotal(key_id=key, model=model, requests=1, prompt_tokens=2, completion_tokens=3, last_at=0.0)


@pytest.fixture
def away_from_utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The server's local time zone is not UTC: the invoice's hours must not follow it."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("away_from_utc")
def test_the_csv_has_a_row_per_hour_key_and_model_in_utc_the_operator_last_in_its_hour() -> None:
    charges = [ChargeRow(hour=H, key_id=OPERATOR, model="a", gpu_class="H100", idle_s=4.0, cost=0.004),
               ChargeRow(hour=H, key_id="k", model="b", gpu_class="H100", busy_s=1.0, cost=0.001)]
    text = usage_csv([(H, total("k", "b")), (H + 1, total("k", "a"))], charges, {"k": "team"}, "EUR")
    assert text.splitlines()[1].startswith('"2026-12-15T13:00:00Z","k","team","b","1","2","3"')
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == CSV_HEAD
    assert [r[:4] for r in rows[1:]] == [["2026-12-15T13:00:00Z", "k", "team", "b"],
                                         ["2026-12-15T13:00:00Z", OPERATOR, OPERATOR_NAME, "a"],
                                         ["2026-12-15T14:00:00Z", "k", "team", "a"]]
    assert rows[2][7:] == ["4.000", "0.000", "0.000", "4.000", "0.004000", "EUR"]


def test_a_name_a_spreadsheet_would_run_is_written_as_text() -> None:
    for risky in ("=HYPERLINK(\"x\")", "+1", "-1", "@SUM(A1)", "\tx", "\rx"):
        assert spreadsheet_cell(risky) == "'" + risky
    for plain in ("team", "a=b", "", "1-2"):
        assert spreadsheet_cell(plain) == plain
