"""A build is in use while a shard of it waits out its restart backoff: old builds are removed only once no shard
runs from them."""

from __future__ import annotations

import asyncio
from pathlib import Path

from llmgw.agent.agent import Agent
from llmgw.agent.engines import Launch
from llmgw.agent.supervisor import Supervisor
from llmgw.config.agent import AgentConfig
from llmgw.core.clock import FakeClock
from llmgw.wire.messages import ShardSpec
from tests.agent.installs.fake_builds import fake_archive, fake_server_script
from tests.agent.installs.release import Release, release_server
from tests.agent.installs.test_install import publish
from tests.agent.installs.test_installer import X86
from tests.agent.test_agent_report import config


async def test_a_build_whose_shard_waits_to_restart_is_kept(tmp_path: Path) -> None:
    cfg = AgentConfig.model_validate({**config(tmp_path, "h100x8-ib2", []).model_dump(),
                                      "probe_engines": ["sim", "llamacpp"]})
    clock = FakeClock()
    a = Agent(cfg, clock)
    a._hardware = X86
    with release_server(Release()) as rel:
        b1 = publish(rel, "b1", fake_archive("b1", fake_server_script()))
        await a.converge_engines([b1])
        await asyncio.gather(*[t.task for t in a.installer.tracks.values() if t.task])
        old = Path(a.installer.statuses()[0].path)
        spec = ShardSpec(replica_id="r", model="m", engine="llamacpp", source="/m", rank=0, world_size=1)
        # the shard runs b1's llama-server; this one exits at once, as an engine that crashes would
        a.supervisor = Supervisor(clock, tmp_path / "logs", "127.0.0.1",
                                  lambda s, _: (Launch(argv=[str(old), "serve"]), ""))
        try:
            await a.supervisor.converge([spec])
            sp = a.supervisor.shards[("r", 0)]
            assert sp.proc is not None
            await sp.proc.wait()
            await a.supervisor.tick()  # exited: restarted in 10 s
            assert sp.state == "exited", sp.state
            b2 = publish(rel, "b2", fake_archive("b2", fake_server_script()))  # the operator moves on to b2
            await a.converge_engines([b2])
            await asyncio.gather(*[t.task for t in a.installer.tracks.values() if t.task])
            await a.converge_engines([b2])
            removed = not old.exists()
            clock.advance(10.5)
            await a.supervisor.tick()
            print(f"\nb1 removed: {removed}; shard after its restart: {sp.state} {sp.message!r}")
            assert not removed, f"{old.parents[1]} removed while its shard waits to restart from it"
        finally:
            await a.supervisor.close()
            await a.installer.close()
