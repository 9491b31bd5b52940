"""The agent's loop outlives a pass that fails unexpectedly: it says so once, keeps what runs, and reports again.
A real agent against a real control plane over mutual TLS; only the failure is planted."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from llmgw.agent.agent import Agent
from llmgw.config.agent import AgentConfig
from llmgw.core.clock import SystemClock
from llmgw.dev.cluster import ClusterPlan, NodePlan
from llmgw.wire.messages import NodeReport
from tests.harness import InProcessServer, aget, await_until, plan

pytestmark = pytest.mark.real  # processes: the unit tier leaves this file out (tests/tiers.py)

HOSTS = Path(__file__).resolve().parents[1] / "fixtures" / "hosts"


def config(p: ClusterPlan, tmp: Path) -> AgentConfig:
    pki = p.workdir / "pki"
    return AgentConfig.model_validate({
        "control_planes": [f"https://127.0.0.1:{p.agent_port}"],
        "tls": {"ca": str(pki / "ca.crt"), "cert": str(pki / "node01.crt"), "key": str(pki / "node01.key")},
        "node_id": "node01",
        "address": "127.0.0.1",
        "host_root": str(HOSTS / "cpu-avx2"),
        "weights_dir": str(tmp / "weights"),
        "state_dir": str(tmp / "state"),
        "probe_engines": ["sim"],
        "peer_port": 0,
        "heartbeat_interval": "0.1s",
    })


async def test_a_pass_that_fails_unexpectedly_is_logged_once_and_the_agent_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    p = plan(tmp_path / "cluster", [NodePlan(id="node01", address="127.0.0.1")], [])
    agent = Agent(config(p, tmp_path), SystemClock())
    real_report = agent.report
    passes = 0

    async def report() -> NodeReport:
        nonlocal passes
        passes += 1
        if passes <= 3:  # the same unexpected error three passes in a row, then none
            raise RuntimeError("a planted fault in the report")
        return await real_report()

    agent.report = report  # type: ignore[method-assign]
    stop = asyncio.Event()
    caplog.set_level(logging.ERROR, logger="llmgw.agent.agent")
    async with InProcessServer(p):
        running = asyncio.create_task(agent.run(stop))
        try:
            async def reported() -> bool:
                assert not running.done(), f"the agent's loop ended: {running.exception()!r}"
                return any(n["node"] == "node01" for n in await aget(p, "/api/nodes"))

            await await_until(reported, 20, "the agent reporting after its failed passes")
        finally:
            stop.set()
            await asyncio.wait_for(running, 20)
    said = [r for r in caplog.records if "agent pass failed" in r.getMessage()]
    assert len(said) == 1 and said[0].exc_info is not None, [r.getMessage() for r in said]
    assert passes > 3
