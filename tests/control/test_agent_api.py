"""The agents' door over real mutual TLS: identity from the certificate, bad input refused, nothing lost."""

from __future__ import annotations

import ssl
from pathlib import Path

import aiohttp
import pytest

from llmgw.dev.cluster import NodePlan
from llmgw.pki.ca import init_ca, issue
from llmgw.pki.tls import client_context
from llmgw.wire.messages import DesiredState, Hardware, NodeReport
from tests.harness import InProcessServer, aget, plan


@pytest.fixture
def cluster(tmp_path: Path):  # type: ignore[no-untyped-def]
    return plan(
        tmp_path, [NodePlan(id="node01", address="127.0.0.11"), NodePlan(id="node02", address="127.0.0.12")], []
    )


def ctx(p, node: str) -> ssl.SSLContext:  # type: ignore[no-untyped-def]
    pki = p.workdir / "pki"
    return client_context(pki / f"{node}.crt", pki / f"{node}.key", pki / "ca.crt")


def report(node_id: str) -> NodeReport:
    return NodeReport(node_id=node_id, address="127.0.0.11", hardware=Hardware(mem_total_bytes=2**30))


async def post(p, sslctx: ssl.SSLContext, body: str) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    url = f"https://127.0.0.1:{p.agent_port}/v1/agent/heartbeat"
    async with (
        aiohttp.ClientSession() as s,
        s.post(url, data=body, ssl=sslctx, headers={"Content-Type": "application/json"}) as r,
    ):
        return r.status, await r.text()


async def test_heartbeat_registers_the_certificates_node(cluster) -> None:  # type: ignore[no-untyped-def]
    async with InProcessServer(cluster):
        status, text = await post(cluster, ctx(cluster, "node01"), report("node01").model_dump_json())
        assert status == 200
        assert DesiredState.model_validate_json(text).node_id == "node01"
        rows = await aget(cluster, "/api/nodes")
        assert [r["node"] for r in rows] == ["node01"]


async def test_a_node_cannot_write_another_nodes_record(cluster) -> None:  # type: ignore[no-untyped-def]
    async with InProcessServer(cluster):
        status, text = await post(cluster, ctx(cluster, "node01"), report("node02").model_dump_json())
        assert status == 403
        assert "may not write node 'node02'" in text
        assert await aget(cluster, "/api/nodes") == []


async def test_malformed_heartbeat_is_422_naming_the_field_and_changes_nothing(cluster) -> None:  # type: ignore[no-untyped-def]
    async with InProcessServer(cluster):
        ok = report("node01")
        assert (await post(cluster, ctx(cluster, "node01"), ok.model_dump_json()))[0] == 200
        before = await aget(cluster, "/api/nodes")
        bad = ok.model_dump()
        bad["hardware"]["mem_total_bytes"] = "lots"
        del bad["address"]
        import json

        status, text = await post(cluster, ctx(cluster, "node01"), json.dumps(bad))
        assert status == 422
        assert "hardware.mem_total_bytes" in text and "address: field required" in text
        assert await aget(cluster, "/api/nodes") == before


async def test_certificate_from_another_ca_is_refused_at_the_handshake(cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    other = tmp_path / "other-ca"
    init_ca(other)
    issue(other, "node01")
    foreign = client_context(other / "node01.crt", other / "node01.key", cluster.workdir / "pki" / "ca.crt")
    async with InProcessServer(cluster):
        with pytest.raises((aiohttp.ClientConnectorError, aiohttp.ClientOSError, ssl.SSLError)):
            await post(cluster, foreign, report("node01").model_dump_json())
        assert await aget(cluster, "/api/nodes") == []


async def test_no_client_certificate_is_refused(cluster) -> None:  # type: ignore[no-untyped-def]
    bare = ssl.create_default_context(cafile=str(cluster.workdir / "pki" / "ca.crt"))
    async with InProcessServer(cluster):
        with pytest.raises((aiohttp.ClientConnectorError, aiohttp.ClientOSError, ssl.SSLError)):
            await post(cluster, bare, report("node01").model_dump_json())
