"""A restarted agent adopts the running engines of installed builds its predecessor handed over, instead of
killing them because no hardware was discovered yet when it looked for their builds."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from llmgw.agent.agent import Agent
from llmgw.agent.engines import Launch
from llmgw.agent.supervisor import Supervisor
from llmgw.agent.supervisor.adopt import find_running
from llmgw.config.agent import AgentConfig
from llmgw.core.clock import FakeClock
from llmgw.core.errors import UpstreamError
from llmgw.wire.messages import ShardSpec
from tests.agent.installs.fake_builds import fake_archive, fake_server_script
from tests.agent.installs.release import Release, release_server
from tests.agent.installs.test_install import publish
from tests.agent.installs.test_installer import X86
from tests.agent.test_agent_report import config
from tests.harness import alive, holds_for


class Unreachable:
    async def heartbeat(self, report: object) -> object:
        raise UpstreamError("control plane unreachable")

    async def close(self) -> None:
        pass


async def test_a_restarted_agent_adopts_the_installed_engine_it_was_handed(tmp_path: Path) -> None:
    cfg = AgentConfig.model_validate({**config(tmp_path, "h100x8-ib2", []).model_dump(),
                                      "probe_engines": ["sim", "llamacpp"]})
    logs = Path(cfg.state_dir) / "logs"
    clock = FakeClock()
    with release_server(Release()) as rel:
        first = Agent(cfg, clock)
        first._hardware = X86
        b1 = publish(rel, "b1", fake_archive("b1", fake_server_script()))
        await first.converge_engines([b1])
        await asyncio.gather(*[t.task for t in first.installer.tracks.values() if t.task])
        assert first.installer.statuses()[0].runs
    # the first agent's shard of llamacpp (a stand-in process that keeps running), then the agent goes
    spec = ShardSpec(replica_id="r", model="m", engine="llamacpp", source="org/m", rank=0, world_size=1)
    prev = Supervisor(clock, logs, "127.0.0.1", lambda s, _: (Launch(argv=["sleep", "30"]), ""))
    await prev.converge([spec])
    pid = prev.shards[("r", 0)].proc.pid  # type: ignore[union-attr]
    prev.shards.clear()  # handed over: nothing stopped
    try:
        second = Agent(cfg, clock)
        second.supervisor = Supervisor(clock, logs, second.address, second.resolve)
        second.client = Unreachable()  # type: ignore[assignment]
        second._found = find_running(logs)  # what start() does
        assert list(second._found) == [("r", 0)]
        await second.step()
        print(f"\nengines at adoption: {[e.name for e in second.engines]}; adopted: {list(second.supervisor.shards)}")
        holds_for(lambda: alive(pid), 1.0, "the engine handed over by the previous agent still runs")
        assert ("r", 0) in second.supervisor.shards
    finally:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        await second.installer.close()
