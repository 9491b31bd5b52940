"""A model's LoRA adapters in its shards' desired state: each with how its file is had, fetched from the origin
once per fabric like weights."""

from __future__ import annotations

from llmgw.config.server import ModelSpec
from llmgw.config.serving import AdapterConfig
from llmgw.control.nodes.desired import desired_for
from llmgw.control.nodes.weights import plans_for
from llmgw.records.state import ReplicaRecord, ShardAssignment
from llmgw.wire.messages import WeightsPlan
from tests.clusters import model, node

URL = "https://models.example/pirate.gguf"
DIGEST = "cd" * 32


def _spec() -> dict[str, ModelSpec]:
    base = model(source="/w/base.gguf", gpus_per_shard=0, cls=None)
    adapters = [AdapterConfig(name="m-pirate", source=URL, sha256=DIGEST, size=2000),
                AdapterConfig(name="m-legal", source="/w/legal.gguf")]
    return {"m": base.model_copy(update={"adapters": adapters})}


def _replicas(*node_ids: str) -> list[ReplicaRecord]:
    return [ReplicaRecord(id=f"m-{i}", model="m", shards_expected=1, created_at=0.0, assignments=[
        ShardAssignment(node_id=n, address="10.0.0.1", rank=0, gpus=[])]) for i, n in enumerate(node_ids)]


def test_a_fetched_adapter_is_fetched_once_per_fabric_and_copied_by_the_others() -> None:
    nodes = {n: node(n, fabric="ib-a") for n in ("n1", "n2")}
    nodes = {k: v.model_copy(update={"report": v.report.model_copy(update={"peer_port": 7480})})
             for k, v in nodes.items()}
    models = _spec()
    first, chosen = plans_for("n1", nodes, _replicas("n1", "n2"), models)
    second, _ = plans_for("n2", nodes, _replicas("n1", "n2"), models, chosen)
    assert first == {URL: WeightsPlan(sha256=DIGEST, size=2000)}, "only the URL: a path is the node's own"
    assert (second[URL].origin, second[URL].wait_for) == (False, "n1")


def test_the_shard_carries_its_adapters_in_the_catalog_order_with_their_plans() -> None:
    plan = WeightsPlan(sha256=DIGEST, size=2000)
    desired = desired_for("n1", _replicas("n1"), _spec(), ["llamacpp"], 3.0,
                          weights={URL: plan})
    [shard] = desired.shards
    assert [(a.name, a.source, a.weights) for a in shard.adapters] == [
        ("m-pirate", URL, plan), ("m-legal", "/w/legal.gguf", None)]
