"""A running shard is not restarted when only how its weights are to be had changes: another node of its fabric
now holds them (peers), the node to wait for, the hub token. A shard whose weights themselves change is."""

from __future__ import annotations

from pathlib import Path

from llmgw.agent.engines import Launch
from llmgw.agent.engines.base import Loopback
from llmgw.agent.supervisor import Supervisor
from llmgw.core.clock import FakeClock
from llmgw.wire.hub import HubFile
from llmgw.wire.messages import Problem, ShardSpec, WeightsPeer, WeightsPlan
from tests.agent.supervisor.test_supervisor import NONE, _is, sim_launch
from tests.harness import await_until, free_port

SOURCE = "hf://acme/m@" + "c" * 40
PLAN = WeightsPlan(size=10, files=[HubFile(path="model.safetensors", size=10)],
                   base_url="https://hub.example/acme/m/resolve/" + "c" * 40)


def spec(port: int, plan: WeightsPlan) -> ShardSpec:
    return ShardSpec(replica_id="r1", model="m", engine="sim", source=SOURCE, rank=0, world_size=1, serve_port=port,
                     weights=plan)


async def test_peers_wait_for_and_token_changes_keep_the_engine(tmp_path: Path) -> None:
    s = Supervisor(FakeClock(), tmp_path, "127.0.0.1", sim_launch)
    port = free_port()
    try:
        await s.converge([spec(port, PLAN)])
        await await_until(lambda: _is(s, "ready"), 20, "shard ready")
        pid = s.states()[0].pid
        later = PLAN.model_copy(update={"peers": [WeightsPeer(node_id="n2", address="10.0.0.2", port=9)],
                                        "token": "hf_rotated", "origin": False, "wait_for": "n2"})
        await s.converge([spec(port, later)])
        assert s.states()[0].pid == pid, "the engine was restarted for a plan that changes nothing it reads"
        assert s.shards[("r1", 0)].spec.weights == later, "the shard reads the plan it was last told"
        other = PLAN.model_copy(update={"files": [HubFile(path="model.safetensors", size=11)], "size": 11})
        await s.converge([spec(port, other)])
        assert not s.states() or s.states()[0].pid != pid
    finally:
        await s.close()


def needs_token(s: ShardSpec, ports: Loopback = NONE) -> tuple[Launch | None, str | Problem]:
    if s.weights is None or not s.weights.token:
        return None, Problem(code="HubAccessDenied", message="the hub refused the files: no token")
    return sim_launch(s, ports)


async def test_a_shard_failed_for_its_plan_is_prepared_again_from_a_new_one(tmp_path: Path) -> None:
    s = Supervisor(FakeClock(), tmp_path, "127.0.0.1", needs_token)
    port = free_port()
    try:
        await s.converge([spec(port, PLAN)])
        assert s.states()[0].state == "failed"
        await s.converge([spec(port, PLAN.model_copy(update={"token": "hf_given"}))])
        await await_until(lambda: _is(s, "ready"), 20, "shard ready once the token is there")
    finally:
        await s.close()
