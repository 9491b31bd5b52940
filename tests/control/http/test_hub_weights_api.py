"""The management API shows where each hub model's weights stand (/api/models, /api/status, /api/explain): the
commit it resolved to and each node's part, or the hub state's reason and words; a real control plane over SQLite,
its nodes' reports taken in by its own heartbeats, asked over loopback HTTP."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from llmgw.api.model_weights import ModelWeights
from llmgw.api.router import ModelExplanation, model_explanation_lines
from llmgw.config.server import ServerConfig, TLSFiles
from llmgw.control.http.admin_api import admin_app
from llmgw.control.plane import ControlPlane
from llmgw.control.views.summary import Summary
from llmgw.core.clock import FakeClock
from llmgw.core.reasons import Reason
from llmgw.store.sqlite import SqliteStore
from llmgw.wire.hub import HubFile, HubState, Resolution
from llmgw.wire.messages import FetchStatus
from tests.clusters import model, node
from tests.harness import free_port

TOKEN = "t" * 32
C1 = "c" * 40
SRC = "hf://org/qwen@main"
PINNED = f"hf://org/qwen@{C1}"
RES = Resolution(repo="org/qwen", revision="main", commit=C1,
                 files=(HubFile(path="model.safetensors", size=8_000_000_000), HubFile(path="config.json", size=700)))
RESOLVED = {"q": HubState(source=SRC, resolution=RES, since=1.0)}
DENIED = {"q": HubState(source=SRC, reason=Reason.HubAccessDenied, since=1.0,
                        message="org/qwen is gated: the hub answered 401 and no token is configured (hub.token_file)")}


def hub_plane(tmp_path: Path) -> ControlPlane:
    cfg = ServerConfig(tls=TLSFiles(ca="x", cert="x", key="x"),
                       models=[model("q", source=SRC, min_=0, max_=1), model("local")])
    plane = ControlPlane(cfg, SqliteStore(tmp_path / "s.db").open(), FakeClock())
    plane.load()
    fetch = FetchStatus(source=PINNED, state="fetching", via="node01", done_bytes=2_000_000_000,
                        total_bytes=RES.total_bytes, done_files=0, total_files=2, rate_bps=1e8, eta_s=60.0,
                        message="copying from node01")
    n2 = node("node02").report
    for report in (node("node01", weights=(PINNED,)).report, n2.model_copy(update={"fetches": [fetch]})):
        plane.heartbeats.heartbeat(report)
    return plane


@asynccontextmanager
async def api(plane: ControlPlane,
              hub: Callable[[], Mapping[str, HubState]]) -> AsyncIterator[Callable[[str], Any]]:
    status = dataclasses.replace(plane.status(), hub=hub)  # as the plane wires its hub owner
    runner = web.AppRunner(admin_app(status, plane.limit_counters, plane.gauges, plane.health, TOKEN,
                                     frozenset({"127.0.0.1"})))
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    session = aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"})

    async def get(path: str) -> Any:
        async with session.get(f"http://127.0.0.1:{port}{path}") as r:
            assert r.status == 200, await r.text()
            return await r.json()

    try:
        yield get
    finally:
        await session.close()
        await runner.cleanup()


async def test_a_resolved_hub_model_shows_its_commit_and_each_nodes_progress(tmp_path: Path) -> None:
    plane = hub_plane(tmp_path)
    async with api(plane, lambda: RESOLVED) as get:
        rows = {m["name"]: m for m in await get("/api/models")}
        assert rows["local"]["weights"] is None  # a path on the nodes: nothing fetched
        w = ModelWeights.model_validate(rows["q"]["weights"])
        assert (w.resolved, w.commit, w.total_files, w.held) == (True, C1, 2, 1)
        assert [(n.node, n.state, n.done_files, n.total_files) for n in w.nodes] == [
            ("node01", "held", 2, 2), ("node02", "fetching", 0, 2)]
        s = Summary.model_validate(await get("/api/status"))
        assert [x.model_dump() for x in s.weights] == [w.model_dump()]
        told = ModelExplanation.model_validate(await get("/api/explain/q"))
        assert told.weights == w
        lines = model_explanation_lines(told)
        assert f"weights: {SRC} at commit {C1[:12]}: 8.0 GB in 2 files" in lines
        assert "  2.0 GB of 8.0 GB, 0 of 2 files on node02 (copying from node01 at 100 MB/s, about 60 s left)" in lines


async def test_an_unresolved_hub_model_says_why_in_the_resolvers_words_everywhere(tmp_path: Path) -> None:
    plane = hub_plane(tmp_path)
    async with api(plane, lambda: DENIED) as get:
        rows = {m["name"]: m for m in await get("/api/models")}
        w = ModelWeights.model_validate(rows["q"]["weights"])
        assert (w.resolved, w.reason, w.held, w.nodes) == (False, Reason.HubAccessDenied, 0, [])
        assert w.message == DENIED["q"].message
        s = Summary.model_validate(await get("/api/status"))
        assert s.weights == [w]
        told = ModelExplanation.model_validate(await get("/api/explain/q"))
        words = f"weights: {SRC}: HubAccessDenied: {DENIED['q'].message}"
        assert model_explanation_lines(told)[:2] == [
            "q: no replica wanted now (min 0, on demand: True)", words]


async def test_without_a_hub_owner_a_hub_model_reads_as_resolving_never_resolved(tmp_path: Path) -> None:
    plane = hub_plane(tmp_path)
    async with api(plane, lambda: {}) as get:
        rows = {m["name"]: m for m in await get("/api/models")}
        w = ModelWeights.model_validate(rows["q"]["weights"])
        assert (w.resolved, w.reason, w.held) == (False, Reason.HubResolving, 0)
