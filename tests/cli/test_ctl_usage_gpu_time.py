"""`ctl usage` shows GPU time and its cost: one row per key (its models summed) with the operator's share named
and last, a total, and the CSV with GPU-seconds and cost columns a spreadsheet reads; the totals shown are what
the store holds. A real control plane and the real CLI; charges written to its real store."""

from __future__ import annotations

import csv
import io
import json
import time
from pathlib import Path

import pytest

from llmgw.control.chargeback.charge_views import CSV_HEAD, OPERATOR_NAME
from llmgw.records.chargeback import OPERATOR
from llmgw.store.base import UsageRecord, hour_of
from llmgw.store.sqlite import SqliteStore
from tests.cli.test_ctl_keys import ctl
from tests.control.chargeback.test_usage_gpu_time import charge, cluster, make_key, plant_charges, plant_usage
from tests.harness import InProcessServer


async def test_usage_by_key_shows_gpu_seconds_cost_and_the_operator(tmp_path: Path) -> None:
    p = cluster(tmp_path)
    async with InProcessServer(p):
        a, b = await make_key(p, "team-a"), await make_key(p, "team-b")
        now = time.time()
        h = hour_of(now - 60)
        await plant_usage(p, [UsageRecord(key_id=a, model=m, replica_id=f"{m}-1", prompt_tokens=10,
                                          completion_tokens=5, started_at=now - 60, duration_s=1, status=200)
                              for m in ("m", "n")])
        plant_charges(p, [charge(h, a, "m", busy=1000), charge(h, a, "n", busy=500, load=100),
                          charge(h, b, "n", idle=36), charge(h, OPERATOR, "m", idle=3600)])
        out = await ctl(p, "usage", "--by", "key", "--since", "1h")
        assert out.returncode == 0, out.stdout + out.stderr
        lines = out.stdout.splitlines()
        (mine,) = [ln for ln in lines if "team-a" in ln]  # one row for the key: both models summed
        assert "2" in mine.split() and "1600.0" in mine and "1.6000" in mine  # 2 requests, 1600 GPU-s, 3.6 EUR/h
        (ops,) = [ln for ln in lines if OPERATOR_NAME in ln]
        assert "3600.0" in ops and "3.6000" in ops
        assert lines.index(ops) > lines.index(mine)  # the operator's share after the keys
        assert "cost EUR" in out.stdout
        (total,) = [ln for ln in lines if ln.strip("│ ").startswith("total")]
        assert "5236.0" in total and "5.2360" in total

        by_model = json.loads((await ctl(p, "usage", "--by", "model", "--since", "1h", "--json")).stdout)
        assert {r["model"]: r["gpu_seconds"] for r in by_model["rows"]} == pytest.approx({"m": 4600, "n": 636})


async def test_the_totals_shown_are_what_the_store_holds(tmp_path: Path) -> None:
    """Summed over keys and the operator, `ctl usage --by key --json` and the CSV give the GPU-seconds and the cost
    the store's charges hold for the period (rounded to the CSV's places)."""
    p = cluster(tmp_path)
    async with InProcessServer(p):
        keys = [await make_key(p, f"k{i}") for i in range(3)]
        h = hour_of(time.time())
        plant_charges(p, [charge(h - back, k, m, cls=cls, busy=1.25 * i + back, load=0.5 * back, idle=i / 3)
                          for back in range(3) for i, k in enumerate([*keys, OPERATOR])
                          for m in ("m", "n") for cls in ("H100", "A100")])
        store = SqliteStore(p.workdir / "state" / "llmgw.db").open()
        try:
            held = store.charges_since(time.time() - 7200)
        finally:
            store.close()
        want = (sum(c.gpu_s for c in held), sum(c.cost for c in held))
        assert want[0] > 0 and len({c.hour for c in held}) == 3

        rows = json.loads((await ctl(p, "usage", "--by", "key", "--since", "2h", "--json")).stdout)["rows"]
        assert [r["key"] for r in rows][-1] == OPERATOR and len(rows) == 4
        assert (sum(r["gpu_seconds"] for r in rows), sum(r["cost"] for r in rows)) == pytest.approx(want)
        assert sum(r["busy_s"] + r["load_s"] + r["idle_s"] for r in rows) == pytest.approx(want[0])

        out = await ctl(p, "usage", "--csv", "--since", "2h")
        table = list(csv.DictReader(io.StringIO(out.stdout)))
        assert list(table[0]) == CSV_HEAD and len(table) == 3 * 4 * 2  # hours x (keys + operator) x models
        assert {r["key_name"] for r in table if r["key_id"] == OPERATOR} == {OPERATOR_NAME}
        got = (sum(float(r["gpu_seconds"]) for r in table), sum(float(r["cost"]) for r in table))
        assert got == pytest.approx(want, abs=len(table) * 1e-3)  # each cell rounded to 3 (seconds), 6 (cost)
