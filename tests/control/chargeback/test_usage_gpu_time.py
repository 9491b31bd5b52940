"""The management API's usage views carry GPU time and its cost beside tokens, from the store's hourly charges:
per key or model (/api/usage), per hour, key and model (/api/usage.csv), the operator's share a row of its own,
and GPU time no tokens went with shown too. A real control plane; charges written to its real store."""

from __future__ import annotations

import asyncio
import csv
import io
import time
from collections.abc import Sequence
from pathlib import Path

import aiohttp
import pytest

from llmgw.api.router import ActivityReport
from llmgw.control.chargeback.charge_book import REFRESH, ChargeBook
from llmgw.control.chargeback.charge_views import CSV_HEAD, OPERATOR_NAME, REQUESTS_HEAD
from llmgw.core.clock import FakeClock
from llmgw.dev.cluster import ClusterPlan, admin_post
from llmgw.records.chargeback import OPERATOR, ChargeRow
from llmgw.store.base import UsageRecord, hour_of
from llmgw.store.sqlite import SqliteStore
from tests.harness import InProcessServer, aget, plan, plane_in

MODELS = [{"name": name, "source": f"org/{name}", "engine": "sim", "scaling": {"min": 0, "max": 1}}
          for name in ("m", "n")]


def cluster(tmp_path: Path) -> ClusterPlan:
    return plan(tmp_path, [], MODELS, extra_server={"chargeback": {"rates": {"H100": 3.6}, "currency": "EUR"}})


def plant_charges(p: ClusterPlan, rows: Sequence[ChargeRow], shares: dict[str, float] | None = None) -> None:
    """Charges as the leader's chargeback writes them: one step at the store's mark (left where it is)."""
    store = SqliteStore(p.workdir / "state" / "llmgw.db").open()
    try:
        mark = store.charge_mark()
        store.put_charges(rows, [], mark, mark, shares=shares)
    finally:
        store.close()


async def plant_usage(p: ClusterPlan, usage: list[UsageRecord]) -> None:
    """Usage as a router worker reports it."""
    token = (p.workdir / "state" / "admin.token").read_text().strip()
    async with aiohttp.ClientSession() as s, s.post(
            p.admin + "/api/router/activity", data=ActivityReport(usage=usage).model_dump_json(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"}) as r:
        assert r.status == 200, await r.text()


async def make_key(p: ClusterPlan, name: str) -> str:
    return str((await asyncio.to_thread(admin_post, p, "/api/keys", {"name": name}))["id"])


async def admin_text(p: ClusterPlan, path: str) -> str:
    token = (p.workdir / "state" / "admin.token").read_text().strip()
    async with aiohttp.ClientSession() as s, s.get(p.admin + path,
                                                   headers={"Authorization": f"Bearer {token}"}) as r:
        assert r.status == 200, await r.text()
        return await r.text()


def charge(hour: int, key: str, model: str, cls: str = "H100", busy: float = 0.0, load: float = 0.0,
           idle: float = 0.0) -> ChargeRow:
    return ChargeRow(hour=hour, key_id=key, model=model, gpu_class=cls, busy_s=busy, load_s=load, idle_s=idle,
                     cost=(busy + load + idle) * 3.6 / 3600)


async def test_usage_by_key_and_model_carries_gpu_time_cost_and_the_operators_share(tmp_path: Path) -> None:
    p = cluster(tmp_path)
    async with InProcessServer(p):
        a, b = await make_key(p, "team-a"), await make_key(p, "team-b")
        now = time.time()
        h = hour_of(now - 60)
        await plant_usage(p, [UsageRecord(key_id=a, model="m", replica_id="m-1", prompt_tokens=10,
                                          completion_tokens=5, started_at=now - 60, duration_s=1, status=200)])
        plant_charges(p, [
            charge(h, a, "m", busy=100, load=20, idle=30),
            charge(h, a, "m", cls="A100", busy=10),  # priced at nothing (no rate for A100): counted all the same
            charge(h, b, "n", load=50),  # a load for team-b whose request has not landed: GPU time, no tokens
            charge(h, OPERATOR, "n", idle=400),
            charge(h - 30, a, "m", busy=1000),  # before the period asked for
        ])
        got = await aget(p, "/api/usage?by=key&since=3600")
        assert got["currency"] == "EUR"
        rows = {r["key"]: r for r in got["rows"]}
        assert [r["key"] for r in got["rows"]] == [*sorted([a, b]), OPERATOR]  # the operator's share last
        assert rows[a]["name"] == "team-a" and rows[a]["requests"] == 1 and rows[a]["prompt_tokens"] == 10
        assert (rows[a]["busy_s"], rows[a]["load_s"], rows[a]["idle_s"]) == pytest.approx((110, 20, 30))
        assert rows[a]["gpu_seconds"] == pytest.approx(160)
        assert rows[a]["cost"] == pytest.approx((150 + 10) * 3.6 / 3600)
        assert rows[b]["requests"] == 0 and rows[b]["gpu_seconds"] == pytest.approx(50)
        assert rows[OPERATOR]["name"] == OPERATOR_NAME and rows[OPERATOR]["idle_s"] == pytest.approx(400)
        assert rows[OPERATOR]["requests"] == 0

        by_model = {r["model"]: r for r in (await aget(p, "/api/usage?by=model&since=3600"))["rows"]}
        assert by_model["m"]["gpu_seconds"] == pytest.approx(160) and by_model["m"]["requests"] == 1
        assert by_model["n"]["gpu_seconds"] == pytest.approx(450) and by_model["n"]["requests"] == 0


async def test_the_csv_has_gpu_time_and_cost_per_hour_key_and_model(tmp_path: Path) -> None:
    p = cluster(tmp_path)
    async with InProcessServer(p):
        a = await make_key(p, "team-a")
        now = time.time()
        h = hour_of(now - 60)
        await plant_usage(p, [UsageRecord(key_id=a, model="m", replica_id="m-1", prompt_tokens=10,
                                          completion_tokens=5, started_at=now - 60, duration_s=1, status=200)])
        plant_charges(p, [charge(h, a, "m", busy=100, idle=20), charge(h, a, "m", cls="A100", load=30),
                          charge(h, OPERATOR, "m", idle=1800), charge(h - 1, a, "n", load=60)])
        rows = list(csv.reader(io.StringIO(await admin_text(p, "/api/usage.csv?since=7200"))))
        assert rows[0] == CSV_HEAD
        head = {name: i for i, name in enumerate(CSV_HEAD)}
        lines = {(r[head["key_id"]], r[head["model"]], r[head["hour_utc"]]): r for r in rows[1:]}
        assert len(lines) == 3 and rows[-1][head["key_name"]] == OPERATOR_NAME  # GPU classes summed; operator last
        mine = next(r for (k, m, _), r in lines.items() if (k, m) == (a, "m"))
        assert mine[head["requests"]] == "1" and mine[head["currency"]] == "EUR"
        assert [float(mine[head[c]]) for c in ("gpu_seconds", "busy_s", "load_s", "idle_s")] == [150, 100, 30, 20]
        assert float(mine[head["cost"]]) == pytest.approx(0.15, abs=1e-6)  # A100 has no rate
        earlier = next(r for (k, m, _), r in lines.items() if (k, m) == (a, "n"))
        assert earlier[head["requests"]] == "0" and float(earlier[head["load_s"]]) == 60  # a load, no tokens
        ops = next(r for (k, _, _), r in lines.items() if k == OPERATOR)
        assert float(ops[head["idle_s"]]) == 1800 and float(ops[head["cost"]]) == pytest.approx(1.8)


async def test_the_per_request_csv_carries_each_requests_gpu_seconds(tmp_path: Path) -> None:
    """Each request's row carries the GPU-seconds chargeback charged it, summed over the windows it spanned; a
    request not charged yet shows 0; `limit` bounds the rows and says when more were left out."""
    p = cluster(tmp_path)
    async with InProcessServer(p):
        a = await make_key(p, "=team-a")
        now = time.time()
        usage = [UsageRecord(id=f"request-{i}", key_id=a, model="m", replica_id="m-1", prompt_tokens=10 + i,
                             completion_tokens=5, started_at=now - 60 + i, duration_s=1.5, status=200)
                 for i in range(3)]
        await plant_usage(p, usage)
        h = hour_of(now - 60)
        plant_charges(p, [charge(h, a, "m", busy=12)], {"request-0": 4.0, "request-1": 2.5})
        plant_charges(p, [charge(h, a, "m", busy=3)], {"request-0": 3.0, "no-such-request": 9.0})
        rows = list(csv.reader(io.StringIO(await admin_text(p, "/api/usage/requests.csv?since=3600"))))
        assert rows[0] == REQUESTS_HEAD
        col = {name: i for i, name in enumerate(REQUESTS_HEAD)}
        got = [(r[col["request_id"]], r[col["key_name"]], r[col["prompt_tokens"]], r[col["gpu_seconds"]])
               for r in rows[1:]]
        assert got == [("request-0", "'=team-a", "10", "7.000"), ("request-1", "'=team-a", "11", "2.500"),
                       ("request-2", "'=team-a", "12", "0.000")]
        token = (p.workdir / "state" / "admin.token").read_text().strip()
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as s:
            async with s.get(p.admin + "/api/usage/requests.csv?since=3600&limit=2") as r:
                assert r.status == 200 and r.headers.get("Llmgw-Truncated") == "true"
                assert len(list(csv.reader(io.StringIO(await r.text())))) == 3
            for bad in ("0", "-1", "x", "1000001"):
                async with s.get(p.admin + f"/api/usage/requests.csv?limit={bad}") as r:
                    assert r.status == 400, bad
        async with aiohttp.ClientSession() as s, s.get(p.admin + "/api/usage/requests.csv") as r:
            assert r.status == 401  # the operator's: no credential, no rows


async def test_the_dashboards_reading_is_refreshed_every_few_seconds_and_survives_the_store(tmp_path: Path) -> None:
    """The dashboard's GPU time per key is read from the store at most every REFRESH seconds (by the plane's
    clock); while the store cannot be read, the last reading is shown."""
    clock = FakeClock()
    plane = plane_in(tmp_path, clock)
    book, store = ChargeBook("EUR"), plane.storage.store
    h = hour_of(clock.now())
    store.put_charges([charge(h, "k1", "m", busy=10)], [], 0.0, 0.0)
    shown = await book.charges_by_key(plane.storage, clock.now() - 3600, {"k1": "team"})
    assert [(k.name, k.gpu_seconds) for k in shown.keys] == [("team", 10)] and shown.currency == "EUR"
    store.put_charges([charge(h, OPERATOR, "m", idle=5)], [], 0.0, 0.0)
    assert (await book.charges_by_key(plane.storage, clock.now() - 3600, {"k1": "team"})) is shown  # not read again yet
    clock.advance(REFRESH)
    shown = await book.charges_by_key(plane.storage, clock.now() - 3600, {"k1": "team"})
    assert [(k.name, k.gpu_seconds) for k in shown.keys] == [("team", 10), (OPERATOR_NAME, 5)]
    store.close()  # reads now fail
    clock.advance(REFRESH)
    again = await book.charges_by_key(plane.storage, clock.now() - 3600, {"k1": "renamed"})
    assert [(k.name, k.gpu_seconds) for k in again.keys] == [("renamed", 10), (OPERATOR_NAME, 5)]
