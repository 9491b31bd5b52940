"""A tenant reads its own usage with its own key (GET /v1/usage, in the shape of OpenAI's usage API): requests,
tokens, GPU-seconds and cost, by day or hour and by model; never another key's, and nothing without a key. The
real router over a real control plane and SQLite store; the charges are put as chargeback's step puts them."""

from __future__ import annotations

import asyncio
import calendar
from pathlib import Path
from typing import Any

import httpx2 as httpx

from llmgw.core.clock import FakeClock
from llmgw.core.limits import KeyLimits
from llmgw.records.chargeback import ChargeRow
from llmgw.store.base import hour_of
from tests.harness import await_until
from tests.router.test_limits import Limited, limited

NOON = float(calendar.timegm((2026, 12, 15, 12, 0, 0)))
CHAT = {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}


async def flushed(env: Limited) -> None:
    await await_until(lambda: asyncio.sleep(0, not env.router.usage_journal.inflight), 30, "every request ended")
    assert await env.router.usage_journal.flush()


async def usage(h: httpx.AsyncClient, env: Limited, key: str, query: str = "") -> tuple[int, Any]:
    r = await h.get(env.url + "/v1/usage" + query, headers={"Authorization": f"Bearer {key}"} if key else {})
    return r.status_code, r.json()


async def test_a_key_reads_its_own_usage_and_gpu_time_and_no_one_elses(tmp_path: Path) -> None:
    async with limited(tmp_path, FakeClock(NOON)) as env:
        raw_a, a = await env.plane.credentials.create_key("a", [], KeyLimits())
        raw_b, b = await env.plane.credentials.create_key("b", [], KeyLimits())
        async with httpx.AsyncClient(timeout=30) as h:
            for raw in (raw_a, raw_a, raw_a, raw_b):
                r = await h.post(env.url + "/v1/chat/completions", json=CHAT,
                                 headers={"Authorization": f"Bearer {raw}"})
                assert r.status_code == 200, r.text
            await flushed(env)
            hour = hour_of(NOON)
            rows = [ChargeRow(hour=hour, key_id=a.id, model="m", gpu_class="H100", busy_s=10.0, load_s=2.0,
                              idle_s=3.0, cost=0.5),
                    ChargeRow(hour=hour, key_id=b.id, model="m", gpu_class="H100", busy_s=99.0, cost=9.0)]
            env.store.put_charges(rows, [], env.store.charge_mark(), NOON)

            status, page = await usage(h, env, raw_a, "?group_by=model")
            assert status == 200 and page["object"] == "page" and page["has_more"] is False, page
            assert len(page["data"]) == 7 and all(b_["object"] == "bucket" for b_ in page["data"])  # 7 days
            (today,) = [b_ for b_ in page["data"] if b_["results"]]
            assert today["start_time"] <= NOON < today["end_time"]
            (result,) = today["results"]
            assert result["model"] == "m" and result["num_model_requests"] == 3, result
            assert result["input_tokens"] > 0 and result["output_tokens"] > 0, result
            assert (result["gpu_seconds"], result["gpu_seconds_idle"]) == (15.0, 3.0), result
            assert result["cost"] == {"value": 0.5, "currency": "USD"}, result

            status, page = await usage(h, env, raw_b, f"?bucket_width=1h&start_time={int(NOON) - 7200}")
            assert status == 200 and len(page["data"]) == 3, page  # two hours before, and the one holding now
            (result,) = page["data"][-1]["results"]
            assert result["model"] is None and result["num_model_requests"] == 1 and result["gpu_seconds"] == 99.0

            # bounded both ways in the store: a window that ends before today reads none of today's rows
            assert env.store.key_usage_by_hour(a.id, 0.0, NOON - 86400) == []
            assert env.store.key_charges_since(a.id, 0.0, NOON) == []
            assert len(env.store.key_charges_since(a.id, 0.0, NOON + 1)) == 1

            assert (await usage(h, env, ""))[0] == 401
            for bad in ("?bucket_width=1w", "?group_by=key", "?start_time=x", "?bucket_width=1h&start_time=0"):
                status, err = await usage(h, env, raw_a, bad)
                assert status == 400 and err["error"]["code"] == "invalid_value", (bad, err)
