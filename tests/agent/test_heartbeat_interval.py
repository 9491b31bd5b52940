"""The heartbeat interval a control plane sends is taken within bounds: 0 would have the agent heartbeat in a
loop that never sleeps, a day would leave the node lost to its control plane until the agent restarts."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmgw.agent.agent import Agent
from llmgw.agent.supervisor import Supervisor
from llmgw.config.types import HEARTBEAT_MAX_S, HEARTBEAT_MIN_S
from llmgw.core.clock import FakeClock
from llmgw.wire.messages import DesiredState, NodeReport
from tests.agent.test_agent_report import config


class Says:
    """A control plane that answers every heartbeat with one interval."""

    def __init__(self, interval: float) -> None:
        self.interval = interval

    async def heartbeat(self, report: NodeReport) -> DesiredState:
        return DesiredState(node_id=report.node_id, heartbeat_interval=self.interval)

    async def close(self) -> None:
        pass


@pytest.mark.parametrize("sent, taken", [
    (0.0, HEARTBEAT_MIN_S), (-5.0, HEARTBEAT_MIN_S), (1e9, HEARTBEAT_MAX_S), (float("nan"), 3.0), (2.0, 2.0),
])
async def test_the_agent_heartbeats_within_bounds_whatever_it_is_told(tmp_path: Path, sent: float,
                                                                     taken: float) -> None:
    cfg = config(tmp_path, "h100x8-ib2", [])
    agent = Agent(cfg, FakeClock())
    agent.supervisor = Supervisor(agent.clock, tmp_path / "logs", agent.address, agent.resolve)
    agent.client = Says(sent)  # type: ignore[assignment]
    try:
        await agent.step()
        assert agent.interval == taken
    finally:
        await agent.installer.close()
