"""`ctl keys create/update/list` with limits and use, and `ctl usage` (table, JSON, CSV), against a real control
plane; usage is planted the way a router worker reports it."""

from __future__ import annotations

import csv
import io
import json
import time
from pathlib import Path

import aiohttp

from llmgw.api.router import ActivityReport
from llmgw.dev.cluster import ClusterPlan
from llmgw.store.base import UsageRecord
from tests.cli.test_ctl_keys import ctl
from tests.harness import InProcessServer, plan


def cluster(tmp_path: Path) -> ClusterPlan:
    return plan(tmp_path, [], [{"name": "m", "source": "org/m", "engine": "sim", "scaling": {"min": 0, "max": 1}}])


async def test_keys_carry_limits_that_can_be_changed_and_are_listed_with_their_use(tmp_path: Path) -> None:
    p = cluster(tmp_path)
    async with InProcessServer(p):
        made = await ctl(p, "keys", "create", "--name", "team-a", "--rpm", "60", "--budget", "1000/day")
        assert made.returncode == 0, made.stdout + made.stderr
        (k,) = json.loads((await ctl(p, "keys", "list", "--json")).stdout)
        assert k["limits"] == {"rpm": 60, "tpm": None, "concurrency": None, "budget": 1000, "gpu_budget": None,
                               "cost_budget": None, "budget_period": "day"}
        assert k["use"]["own_limits"] and k["use"]["budget_used"] == 0 and k["use"]["requests_left"] is None
        table = (await ctl(p, "keys", "list")).stdout
        assert "60 req/min, 1000 tok/day" in table and "0/1000 tok this day" in table

        out = await ctl(p, "keys", "update", k["id"], "--tpm", "5000", "--concurrency", "4")
        assert out.returncode == 0 and "5000 tok/min, 4 at once" in out.stdout, out.stdout
        (k,) = json.loads((await ctl(p, "keys", "list", "--json")).stdout)
        assert (k["limits"]["tpm"], k["limits"]["concurrency"], k["limits"]["rpm"]) == (5000, 4, None)
        out = await ctl(p, "keys", "update", k["id"], "--default-limits")
        assert out.returncode == 0
        (k,) = json.loads((await ctl(p, "keys", "list", "--json")).stdout)
        assert k["limits"] is None and not k["use"]["own_limits"]

        bad = await ctl(p, "keys", "create", "--name", "b", "--budget", "lots")
        assert bad.returncode == 2 and "TOKENS/day" in bad.stdout
        bad = await ctl(p, "keys", "update", k["id"], "--rpm", "0")
        assert bad.returncode == 1 and "rpm" in bad.stdout  # refused by the API: at least 1


async def test_keys_carry_budgets_in_gpu_seconds_or_money(tmp_path: Path) -> None:
    p = cluster(tmp_path)
    async with InProcessServer(p):
        made = await ctl(p, "keys", "create", "--name", "team-g", "--gpu-budget", "3600/day", "--cost-budget",
                         "12.5/day")
        assert made.returncode == 0, made.stdout + made.stderr
        (k,) = json.loads((await ctl(p, "keys", "list", "--json")).stdout)
        assert (k["limits"]["gpu_budget"], k["limits"]["cost_budget"], k["limits"]["budget_period"]) == (
            3600.0, 12.5, "day")
        assert (k["use"]["gpu_used"], k["use"]["cost_used"], k["use"]["currency"]) == (0.0, 0.0, "USD")
        table = (await ctl(p, "keys", "list")).stdout
        assert "3600 GPU-s/day" in table and "0/3600 GPU-s this day" in table and "0/12.5 USD this day" in table

        bad = await ctl(p, "keys", "update", k["id"], "--gpu-budget", "10/day", "--budget", "5/month")
        assert bad.returncode == 2 and "share one period" in bad.stdout
        bad = await ctl(p, "keys", "update", k["id"], "--gpu-budget", "a lot")
        assert bad.returncode == 2 and "GPU_SECONDS/day" in bad.stdout
        bad = await ctl(p, "keys", "update", k["id"], "--cost-budget", "0/day")
        assert bad.returncode == 1 and "cost_budget" in bad.stdout  # refused by the API: more than 0
        (k,) = json.loads((await ctl(p, "keys", "list", "--json")).stdout)
        assert k["limits"]["cost_budget"] == 12.5  # unchanged


async def test_usage_by_key_and_model_and_as_csv(tmp_path: Path) -> None:
    p = cluster(tmp_path)
    async with InProcessServer(p):
        made = await ctl(p, "keys", "create", "--name", "=HYPERLINK(1)")
        assert made.returncode == 0
        (k,) = json.loads((await ctl(p, "keys", "list", "--json")).stdout)
        now = time.time()
        usage = [UsageRecord(key_id=k["id"], model="m", replica_id="m-1", prompt_tokens=10, completion_tokens=n,
                             started_at=now - 60, duration_s=0.5, status=200) for n in (3, 4)]
        token = (p.workdir / "state" / "admin.token").read_text().strip()
        async with aiohttp.ClientSession() as s, s.post(
                p.admin + "/api/router/activity", data=ActivityReport(usage=usage).model_dump_json(),
                headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"}) as r:
            assert r.status == 200, await r.text()

        by_key = json.loads((await ctl(p, "usage", "--by", "key", "--since", "1h", "--json")).stdout)
        no_gpu_time = {"gpu_seconds": 0.0, "busy_s": 0.0, "load_s": 0.0, "idle_s": 0.0, "cost": 0.0}
        assert by_key["rows"] == [{"key": k["id"], "name": "=HYPERLINK(1)", "requests": 2, "prompt_tokens": 20,
                                   "completion_tokens": 7, **no_gpu_time}]
        by_model = json.loads((await ctl(p, "usage", "--by", "model", "--json")).stdout)
        assert by_model["rows"] == [{"model": "m", "requests": 2, "prompt_tokens": 20, "completion_tokens": 7,
                                     **no_gpu_time}]
        assert "m" in (await ctl(p, "usage", "--by", "model")).stdout

        out = await ctl(p, "usage", "--csv", "--since", "2h")
        assert out.returncode == 0, out.stderr
        rows = list(csv.reader(io.StringIO(out.stdout)))
        assert rows[0][:7] == ["hour_utc", "key_id", "key_name", "model", "requests", "prompt_tokens",
                               "completion_tokens"]  # GPU time and cost follow (test_usage_gpu_time.py)
        assert [r[1:7] for r in rows[1:]] == [[k["id"], "'=HYPERLINK(1)", "m", "2", "20", "7"]]  # not a formula
        assert (await ctl(p, "usage", "--since", "forever")).returncode == 2


async def test_a_name_with_separators_and_quotes_stays_one_cell(tmp_path: Path) -> None:
    """RFC 4180: a key named `team;a,"b"` is one cell, and every number after it stays in its column."""
    p = cluster(tmp_path)
    async with InProcessServer(p):
        assert (await ctl(p, "keys", "create", "--name", 'team;a,"b"')).returncode == 0
        (k,) = json.loads((await ctl(p, "keys", "list", "--json")).stdout)
        usage = [UsageRecord(key_id=k["id"], model="m", replica_id="m-1", prompt_tokens=10, completion_tokens=1,
                             started_at=time.time() - 60, duration_s=0.5, status=200)]
        token = (p.workdir / "state" / "admin.token").read_text().strip()
        async with aiohttp.ClientSession() as s, s.post(
                p.admin + "/api/router/activity", data=ActivityReport(usage=usage).model_dump_json(),
                headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"}) as r:
            assert r.status == 200, await r.text()
        out = (await ctl(p, "usage", "--csv", "--since", "2h")).stdout
        rows = list(csv.reader(io.StringIO(out)))
        assert [r[1:7] for r in rows[1:]] == [[k["id"], 'team;a,"b"', "m", "1", "10", "1"]], out
