"""A transfer cancelled again and again leaves a part it resumes from; a changed plan wakes a job waiting for a peer."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

from llmgw.agent.weights import local
from llmgw.agent.weights.fetcher import Ready, Waiting
from llmgw.wire.messages import WeightsPlan
from tests.agent.installs.release import Release, release_server
from tests.agent.weights.kit import fetcher, settled
from tests.harness import await_until

DATA = os.urandom(12_000_000)


async def test_keep_cancelling_mid_transfer_leaves_a_resumable_part(tmp_path: Path) -> None:
    with release_server(Release(files={"m.gguf": DATA})) as origin:
        gate = origin.hold["m.gguf"] = threading.Event()
        f = fetcher(tmp_path)
        url = origin.url("m.gguf")
        part = local.target_for(tmp_path, url).with_name("m.gguf.part")
        f.ensure(url, None)
        await await_until(lambda: part.exists() and part.stat().st_size > 0, 10, "bytes on disk")
        f.keep(set())
        gate.set()
        plan = WeightsPlan(sha256=hashlib.sha256(DATA).hexdigest())
        got = await settled(f, url, plan)
        assert isinstance(got, Ready) and got.path.read_bytes() == DATA
        await f.close()


async def test_a_plan_change_wakes_a_waiting_job(tmp_path: Path) -> None:
    with release_server(Release(files={"m.gguf": DATA})) as origin:
        f = fetcher(tmp_path)
        url = origin.url("m.gguf")
        wait = WeightsPlan(origin=False, wait_for="node02")
        assert isinstance(f.ensure(url, wait), Waiting)
        await await_until(lambda: "waiting for node02" in f.statuses()[0].message, 5, "waiting")
        got = await settled(f, url, WeightsPlan())
        assert isinstance(got, Ready) and got.path.read_bytes() == DATA
        await f.close()
