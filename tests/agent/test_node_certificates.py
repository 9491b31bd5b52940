"""A node's certificate over its life, against a real control plane over mutual TLS: warned about two weeks before
it ends, one copy revoked with `ctl nodes revoke --serial` while a renewed one is picked up by the running agent's
client without a restart, and a whole node revoked with `ctl nodes revoke`."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from bench.addresses import engine_port_pair

from llmgw.agent.client import ControlPlaneClient
from llmgw.core.errors import UpstreamError
from llmgw.dev.cluster import ClusterPlan, NodePlan
from llmgw.pki.ca import renew
from llmgw.pki.tls import client_context
from llmgw.wire.messages import Hardware, NodeReport
from tests.harness import InProcessServer, aget, plan
from tests.integration.forger import HostileNode

pytestmark = pytest.mark.real  # processes: the unit tier leaves this file out (tests/tiers.py)


async def ctl(p: ClusterPlan, *args: str) -> subprocess.CompletedProcess[str]:
    """`llmgw ctl ARGS` as an operator runs it: another process, the operator token from its file."""
    argv = [sys.executable, "-m", "llmgw.cli.main", "ctl", *args, "--admin", p.admin]
    env = {**os.environ, "LLMGW_ADMIN_TOKEN_FILE": str(p.workdir / "state" / "admin.token"), "COLUMNS": "200"}
    env.pop("LLMGW_ADMIN_TOKEN", None)
    return await asyncio.to_thread(subprocess.run, argv, capture_output=True, text=True, timeout=30, env=env)


def agent_client(p: ClusterPlan, node: str) -> ControlPlaneClient:
    """The agent's own client, built as Agent.start builds it: the TLS context from the files, the files watched."""
    pki = p.workdir / "pki"
    cert, key, ca = pki / f"{node}.crt", pki / f"{node}.key", pki / "ca.crt"
    return ControlPlaneClient([f"https://127.0.0.1:{p.agent_port}"], lambda: client_context(cert, key, ca), 5.0,
                              watch=[str(cert), str(key), str(ca)])


async def node_row(p: ClusterPlan, node: str) -> dict[str, Any]:
    """The node as `ctl nodes` shows it."""
    return next(r for r in await aget(p, "/api/nodes") if r["node"] == node)


def report(node: str, address: str) -> NodeReport:
    return NodeReport(node_id=node, address=address, hardware=Hardware(mem_total_bytes=2**30))


async def test_a_certificate_ending_within_two_weeks_is_warned_about_and_one_ending_later_is_not(
    tmp_path: Path,
) -> None:
    p = plan(tmp_path, [NodePlan(id="node01", address="127.0.0.1"), NodePlan(id="node02", address="127.0.0.1")], [])
    renew(p.workdir / "pki", "node01", days=13)
    renew(p.workdir / "pki", "node02", days=15)
    async with InProcessServer(p):
        for node in ("node01", "node02"):
            status, body = await HostileNode(p, node, "127.0.0.1", engine_port_pair()).heartbeat()
            assert status == 200, body
        rows = {r["node"]: r for r in await aget(p, "/api/nodes")}
        assert [w for w in rows["node01"]["warnings"] if "certificate" in w] == [
            "its certificate expires in 13 day(s): `llmgw ca renew` it and copy it to the node"]
        assert not [w for w in rows["node02"]["warnings"] if "certificate" in w], rows["node02"]["warnings"]
        shown = await ctl(p, "nodes")
        assert shown.returncode == 0, shown.stderr
        assert "expires in 13 day(s)" in shown.stdout and "expires in 15" not in shown.stdout, shown.stdout


async def test_a_revoked_certificate_is_replaced_by_a_renewed_one_without_restarting_the_agent(
    tmp_path: Path,
) -> None:
    p = plan(tmp_path, [NodePlan(id="node01", address="127.0.0.1")], [])
    client = agent_client(p, "node01")
    try:
        async with InProcessServer(p):
            await client.heartbeat(report("node01", "127.0.0.1"))
            serial = (await aget(p, "/api/nodes/node01"))["cert_serial"]
            out = await ctl(p, "nodes", "revoke", "node01", "--serial", serial, "--reason", "key leaked")
            assert out.returncode == 0, out.stdout + out.stderr
            with pytest.raises(UpstreamError) as e:  # the files have not changed: the same certificate, refused
                await client.heartbeat(report("node01", "127.0.0.1"))
            assert "403" in str(e.value) and "key leaked" in str(e.value), e.value
            renew(p.workdir / "pki", "node01")  # what `llmgw ca renew` writes, copied onto the node
            await client.heartbeat(report("node01", "127.0.0.1"))  # the same client: no restart
            row = await node_row(p, "node01")
            assert row["state"] == "live" and row["cert_serial"] != serial, row
    finally:
        await client.close()


async def test_ctl_nodes_revoke_cuts_off_every_certificate_of_a_node(tmp_path: Path) -> None:
    p = plan(tmp_path, [NodePlan(id="node01", address="127.0.0.1")], [])
    client = agent_client(p, "node01")
    try:
        async with InProcessServer(p):
            await client.heartbeat(report("node01", "127.0.0.1"))
            out = await ctl(p, "nodes", "revoke", "node01", "--reason", "decommissioned")
            assert out.returncode == 0 and "node01" in out.stdout, out.stdout + out.stderr
            renew(p.workdir / "pki", "node01")
            with pytest.raises(UpstreamError) as e:  # a renewed certificate does not bring a revoked node back
                await client.heartbeat(report("node01", "127.0.0.1"))
            assert "403" in str(e.value) and "node node01 is revoked: decommissioned" in str(e.value), e.value
            assert (await node_row(p, "node01"))["state"] in ("lost", "revoked")
            refused = await ctl(p, "nodes", "revoke", "node99")
            assert refused.returncode != 0, refused.stdout
    finally:
        await client.close()
