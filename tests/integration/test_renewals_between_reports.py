"""A node whose report has not changed sends a renewal instead of the report; a change (a shard ready, an
engine gone) still reaches the control plane at once; a restarted control plane has every report whole within one
heartbeat interval. A real agent and a real control plane (in this process, restarted in it) over mutual TLS, a real
sim engine."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from pathlib import Path

import pytest
from bench.addresses import engine_ports

from llmgw.agent.agent import Agent
from llmgw.config.agent import AgentConfig
from llmgw.config.loader import load
from llmgw.core.clock import SystemClock
from llmgw.dev.cluster import ClusterPlan, NodePlan
from tests.harness import InProcessServer, aget, await_until, plan

pytestmark = pytest.mark.real  # an engine process

INTERVAL = 3.0
SLACK = 1.0  # a step's own work and a reconcile pass, under load: well under an interval (a step late is caught)
MODELS = [{"name": "sim-small", "source": "org/sim-small", "engine": "sim", "profile": {"gpus_per_shard": 1},
           "scaling": {"min": 1, "max": 1}}]


def ready_at_agent(agent: Agent) -> int | None:
    """The pid of the agent's engine once it serves."""
    if agent.supervisor is None:  # not started yet
        return None
    return next((sp.proc.pid for sp in agent.supervisor.shards.values() if sp.state == "ready" and sp.proc), None)


async def ready_at_plane(p: ClusterPlan) -> bool:
    return any(r["state"] == "ready" for r in (await aget(p, "/api/status"))["replicas"])


async def reported_pid(p: ClusterPlan) -> int | None:
    shards = (await aget(p, "/api/nodes/node01"))["report"]["shards"]
    return shards[0]["pid"] if shards else None


async def test_renewals_between_changes_and_the_report_whole_after_a_restart(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    p = plan(tmp_path, [NodePlan(id="node01", address="127.0.0.1", port_range=engine_ports())], MODELS,
             heartbeat_interval=f"{INTERVAL}s", reconcile_interval="0.2s", node_lost_after="20s")
    agent = Agent(load(AgentConfig, p.workdir / "nodes" / "node01" / "agent.yaml"), SystemClock())
    sent = agent.reporter
    caplog.set_level(logging.INFO, logger="llmgw.agent.renewals")
    stop = asyncio.Event()
    async with InProcessServer(p):
        running = asyncio.create_task(agent.run(stop))
        try:
            # a shard becoming ready reaches the control plane at once, not at the next interval
            pid = await await_until(lambda: ready_at_agent(agent), 60, "the engine ready at the node")
            await await_until(lambda: ready_at_plane(p), SLACK, "the replica ready at the control plane at once")

            # unchanged: renewals only, and the node is alive to the control plane by them
            # (this machine's disk is shared with whatever else runs: a real move of its free space by a step is a
            # change of the report, and the only whole report allowed here)
            whole, renewed, heard = sent.whole, sent.renewals, (await aget(p, "/api/nodes/node01"))["last_seen"]
            moved = sent.why["free memory or disk moved"]
            await await_until(lambda: sent.renewals >= renewed + 3, 4 * INTERVAL + SLACK, "three renewals")
            node = await aget(p, "/api/nodes/node01")
            assert sent.whole - whole == sent.why["free memory or disk moved"] - moved, sent.why
            assert not node["lost"] and node["last_seen"] > heard

            # an engine gone is a change: reported whole at the next step (failure detection as before renewals)
            os.kill(pid, signal.SIGKILL)
            await await_until(lambda: _pid_changed(p, pid),
                              INTERVAL + SLACK, "the engine's exit at the control plane within an interval")
            await await_until(lambda: ready_at_agent(agent) not in (None, pid), 30, "the engine restarted")
            await await_until(lambda: ready_at_plane(p), SLACK, "ready again at the control plane at once")
        except BaseException:
            stop.set()
            await asyncio.wait_for(running, 30)
            raise

        # the next step after a renewal is an interval away: restart the control plane in between
        renewed = sent.renewals
        await await_until(lambda: sent.renewals > renewed, 2 * INTERVAL + SLACK, "a renewal")
    whole = sent.whole
    try:
        async with InProcessServer(p):
            up = time.monotonic()
            await await_until(lambda: sent.whole > whole, INTERVAL + SLACK,
                              "the report whole at the restarted control plane within an interval")
            assert time.monotonic() - up <= INTERVAL + SLACK
            said = [r.getMessage() for r in caplog.records if "wants the whole report" in r.getMessage()]
            assert said and "holds no report of it" in said[-1], said  # refused, in the control plane's words
            await await_until(lambda: sent.renewals > renewed + 1, INTERVAL + SLACK, "renewing again")
    finally:
        stop.set()
        await asyncio.wait_for(running, 30)


async def _pid_changed(p: ClusterPlan, pid: int) -> bool:
    return await reported_pid(p) != pid
