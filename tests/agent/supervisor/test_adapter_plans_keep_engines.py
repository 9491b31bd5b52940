"""A running engine is not restarted because the fabric changed how its LoRA adapters' files are had (another
node came to hold one: new peers, no node waited for), only because its adapters themselves changed."""

from __future__ import annotations

from llmgw.agent.supervisor.process import launched
from llmgw.wire.messages import ShardSpec, WeightsPeer, WeightsPlan
from llmgw.wire.serving import AdapterSpec

URL = "https://files.example/ft.gguf"


def shard(plan: WeightsPlan, name: str = "m-ft") -> ShardSpec:
    return ShardSpec(replica_id="r", model="m", engine="llamacpp", source="/w/m.gguf", rank=0, world_size=1,
                     adapters=[AdapterSpec(name=name, source=URL, weights=plan)])


def test_an_adapters_plan_moving_with_the_fabric_keeps_the_engine() -> None:
    waiting = shard(WeightsPlan(sha256="ab" * 32, size=10, origin=False, wait_for="n2"))
    copying = shard(WeightsPlan(sha256="ab" * 32, size=10, peers=[WeightsPeer(node_id="n2", address="10.0.0.2",
                                                                              port=7480)]))
    assert waiting != copying and launched(waiting) == launched(copying)


def test_another_adapter_or_another_file_restarts_it() -> None:
    plan = WeightsPlan(sha256="ab" * 32, size=10)
    assert launched(shard(plan)) != launched(shard(plan, "m-other"))
    assert launched(shard(plan)) != launched(shard(plan.model_copy(update={"sha256": "cd" * 32})))
