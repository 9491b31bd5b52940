"""Renewals over real mutual TLS against a real server on SQLite: a node whose report has not changed sends a
renewal, which writes nothing; a renewal the control plane cannot take is answered SEND_REPORT, with words."""

from __future__ import annotations

import json
import sqlite3
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from bench.addresses import loopback

from llmgw.dev.cluster import ClusterPlan, NodePlan
from llmgw.pki.ca import renew
from llmgw.pki.tls import client_context
from llmgw.wire.messages import DesiredState, Hardware, NodeReport
from llmgw.wire.renewal import MAX_RENEWAL_BYTES, RENEWAL_PATH, SEND_REPORT, Renewal, RenewalAnswer, ShardLoad
from tests.harness import InProcessServer, aget, await_until, plan

HOST_A, HOST_B = loopback(), loopback()  # the addresses this module's tests name (bench/addresses.py)

GiB = 2**30


@pytest.fixture
def cluster(tmp_path: Path) -> ClusterPlan:
    return plan(tmp_path, [NodePlan(id="node01", address=HOST_A), NodePlan(id="node02", address=HOST_B)],
                [], heartbeat_interval="1s", node_lost_after="3s", reconcile_interval="0.2s")


def ctx(p: ClusterPlan, node: str) -> ssl.SSLContext:
    pki = p.workdir / "pki"
    return client_context(pki / f"{node}.crt", pki / f"{node}.key", pki / "ca.crt")


def report(node_id: str, free: int = GiB, address: str = HOST_A) -> NodeReport:
    return NodeReport(node_id=node_id, address=address, hardware=Hardware(mem_total_bytes=4 * GiB,
                                                                           mem_available_bytes=free))


async def post(p: ClusterPlan, node: str, path: str, body: str | bytes | AsyncIterator[bytes]) -> tuple[int, str]:
    url = f"https://127.0.0.1:{p.agent_port}{path}"
    async with (
        aiohttp.ClientSession() as s,
        s.post(url, data=body, ssl=ctx(p, node), headers={"Content-Type": "application/json"}) as r,
    ):
        return r.status, await r.text()


async def full(p: ClusterPlan, rep: NodeReport) -> DesiredState:
    status, text = await post(p, rep.node_id, "/v1/agent/heartbeat", rep.model_dump_json())
    assert status == 200, text
    return DesiredState.model_validate_json(text)


async def renewal(p: ClusterPlan, node: str, token: str, etag: str = "", **kw: Any) -> tuple[int, str]:
    return await post(p, node, RENEWAL_PATH, Renewal(node_id=node, token=token, etag=etag, **kw).model_dump_json())


def db(p: ClusterPlan) -> sqlite3.Connection:
    return sqlite3.connect(InProcessServer(p).cfg.store.path)


def stored(p: ClusterPlan, node: str) -> tuple[str | None, int]:
    """The node's record as the store has it, and how many events name the node."""
    with db(p) as c:
        row = c.execute("SELECT body FROM nodes WHERE id = ?", (node,)).fetchone()
        events = sum(json.loads(b)["subject"] == node for (b,) in c.execute("SELECT body FROM events"))
    return (row[0] if row else None), int(events)


async def state_of(p: ClusterPlan, node: str) -> str:
    return str({r["node"]: r for r in await aget(p, "/api/nodes")}[node]["state"])


async def test_an_unchanged_node_renews_and_reports_without_a_store_write(cluster: ClusterPlan) -> None:
    async with InProcessServer(cluster):
        d = await full(cluster, report("node01"))
        assert d.renewal_token and d.etag
        body = await await_until(lambda: stored(cluster, "node01")[0], 10, "node01 written")
        before = stored(cluster, "node01")
        for _ in range(8):
            status, text = await renewal(cluster, "node01", d.renewal_token, d.etag)
            assert status == 200, text
            assert RenewalAnswer.model_validate_json(text).desired is None
        view = await aget(cluster, "/api/nodes/node01")
        assert view["last_seen"] > json.loads(body)["last_seen"], "the view says when it was last heard: renewed"
        # the report whole again, free memory moved within a step: kept in memory, not written
        again = await full(cluster, report("node01", free=GiB + 2**20))
        assert again.renewal_token != d.renewal_token and again.etag == d.etag
        await full(cluster, report("node02", address=HOST_B))  # written by the next pass
        await await_until(lambda: stored(cluster, "node02")[0], 10, "node02 written")
        assert stored(cluster, "node01") == before, "an unchanged node's record and events are as they were"
        assert json.loads(body)["report"]["hardware"]["mem_available_bytes"] == GiB
        # a report that says something new is written at once (by the next pass)
        await full(cluster, report("node01", free=3 * GiB))
        await await_until(lambda: stored(cluster, "node01")[0] != body, 10, "node01's new report written")


async def test_a_node_that_only_renews_stays_live_and_one_that_stops_is_lost(cluster: ClusterPlan) -> None:
    async with InProcessServer(cluster):
        d1 = await full(cluster, report("node01"))
        d2 = await full(cluster, report("node02", address=HOST_B))

        async def renewing_until_lost() -> bool:
            status, text = await renewal(cluster, "node01", d1.renewal_token, d1.etag)
            assert status == 200, text
            return await state_of(cluster, "node02") == "lost"

        await await_until(renewing_until_lost, 15, "node02 lost while node01 renews", interval=0.4)
        assert await state_of(cluster, "node01") == "live", "renewals alone keep a node live"
        # a lost node's renewal is refused: its return goes through its report, and is logged
        status, text = await renewal(cluster, "node02", d2.renewal_token, d2.etag)
        assert status == SEND_REPORT and json.loads(text)["report"] is True
        assert "is lost here" in json.loads(text)["error"]
        await full(cluster, report("node02", address=HOST_B))
        assert await state_of(cluster, "node02") == "live"


async def test_after_a_restart_a_renewal_is_told_to_send_its_report_which_is_taken(cluster: ClusterPlan) -> None:
    async with InProcessServer(cluster):
        d = await full(cluster, report("node01"))
        assert (await renewal(cluster, "node01", d.renewal_token, d.etag))[0] == 200
    async with InProcessServer(cluster):
        status, text = await renewal(cluster, "node01", d.renewal_token, d.etag)
        assert status == SEND_REPORT, text
        answer = json.loads(text)
        assert answer["report"] is True and "holds no report of it" in answer["error"]
        d2 = await full(cluster, report("node01", free=2 * GiB))
        assert d2.renewal_token != d.renewal_token
        status, text = await renewal(cluster, "node01", d2.renewal_token, d2.etag)
        assert status == 200, text


async def test_a_renewal_the_server_cannot_take_is_answered_send_report_with_words(cluster: ClusterPlan) -> None:
    async with InProcessServer(cluster):
        status, text = await renewal(cluster, "node01", "never-given")
        assert status == SEND_REPORT and "holds no report of it" in json.loads(text)["error"]
        d = await full(cluster, report("node01"))
        status, text = await renewal(cluster, "node01", "another-servers-token", d.etag)
        assert status == SEND_REPORT and "is not the one this control plane last gave it" in json.loads(text)["error"]
        renew(cluster.workdir / "pki", "node01")  # the node speaks with a new certificate from now on
        status, text = await renewal(cluster, "node01", d.renewal_token, d.etag)
        assert status == SEND_REPORT and "certificate" in json.loads(text)["error"], text
        d = await full(cluster, report("node01"))
        rec = await aget(cluster, "/api/nodes/node01")
        status, text = await renewal(cluster, "node01", d.renewal_token, d.etag)
        assert status == 200, text
        assert rec["cert_serial"] and (await aget(cluster, "/api/nodes/node01"))["cert_serial"] == rec["cert_serial"]


async def test_a_renewal_with_a_stale_etag_gets_the_desired_state_and_loads_go_to_the_routers(
        cluster: ClusterPlan) -> None:
    async with InProcessServer(cluster):
        d = await full(cluster, report("node01"))
        status, text = await renewal(cluster, "node01", d.renewal_token, "stale",
                                     loads=[ShardLoad(replica_id="m-1", rank=0)])
        assert status == 200, text
        got = RenewalAnswer.model_validate_json(text).desired
        assert got is not None and got.etag == d.etag and got.renewal_token == d.renewal_token
        assert got.node_id == "node01"


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        (b"{not json", 422, "not JSON"),
        (json.dumps({"version": 10, "node_id": "node01", "lease": "x"}).encode(), 422, "wire version 10"),
        (json.dumps({"version": 99, "node_id": "node01", "lease": "x"}).encode(), 422, "wire version 99"),
        (json.dumps({"node_id": "node01", "lease": ""}).encode(), 422, "lease"),
        (json.dumps({"node_id": "node01", "lease": "x", "extra": 1}).encode(), 422, "extra"),
        (json.dumps({"node_id": "node02", "lease": "x"}).encode(), 403, "may not renew node 'node02'"),
        (json.dumps({"node_id": "node01", "lease": "x", "etag": "e" * (MAX_RENEWAL_BYTES + 1)}).encode(), 413,
         "over the limit"),
    ],
)
async def test_hostile_renewals_are_refused_in_the_envelope_and_change_nothing(
        cluster: ClusterPlan, body: bytes, status: int, words: str) -> None:
    async with InProcessServer(cluster):
        d = await full(cluster, report("node01"))
        rows = await aget(cluster, "/api/nodes")
        got, text = await post(cluster, "node01", RENEWAL_PATH, body)
        assert got == status and words in json.loads(text)["error"] + text, text
        assert len(text) < 20_000
        assert await aget(cluster, "/api/nodes") == rows
        assert (await renewal(cluster, "node01", d.renewal_token, d.etag))[0] == 200, "the renewal token still stands"


async def test_an_oversize_renewal_without_a_length_is_refused_too(cluster: ClusterPlan) -> None:
    """Sent in chunks, the body names no length up front: it is read (within the listener's own bound) and refused
    for its size all the same."""

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"node_id": "node01", "lease": "x", "etag": "'
        for _ in range(MAX_RENEWAL_BYTES // 4096 + 1):
            yield b"e" * 4096
        yield b'"}'

    async with InProcessServer(cluster):
        status, text = await post(cluster, "node01", RENEWAL_PATH, chunks())
        assert status == 413 and "over the limit" in json.loads(text)["error"], text
