"""What one replica of a model is taken to hold when a request's GPU budget is reserved (ModelSizes, read from the
registry): the most GPUs and the dearest class any of its replicas holds, a CPU engine as one device of class cpu,
a GPU its node does not report priced by none; a model with no replica at its profile's GPUs and the dearest rate."""

from __future__ import annotations

import calendar
from dataclasses import dataclass, field

from llmgw.config.chargeback import ChargebackConfig
from llmgw.config.server import ModelSpec
from llmgw.control.tenants.gpu_budgets import GpuBudgets, ModelSizes, replica_gpus
from llmgw.core.clock import FakeClock
from llmgw.core.gpu_budget import GpuUse, Size
from llmgw.records.state import NodeRecord, ReplicaRecord, ShardAssignment
from tests.clusters import model, node

NOON = float(calendar.timegm((2026, 12, 15, 12, 0, 0)))
RATES = ChargebackConfig(rates={"H100": 3.6, "A100": 1.8, "cpu": 0.5, "*": 7.2})


@dataclass
class FakeRegistry:
    generation: int = 1
    replicas: dict[str, ReplicaRecord] = field(default_factory=dict)
    nodes: dict[str, NodeRecord] = field(default_factory=lambda: {"h": node("h", cls="H100"),
                                                                   "a": node("a", cls="A100")})
    models: dict[str, ModelSpec] = field(default_factory=dict)


def replica(rid: str, model_name: str, *shards: tuple[str, list[int]]) -> ReplicaRecord:
    return ReplicaRecord(id=rid, model=model_name, created_at=NOON, shards_expected=len(shards),
                         assignments=[ShardAssignment(rank=i, node_id=n, address="10.0.0.1", gpus=g)
                                      for i, (n, g) in enumerate(shards)])


def registry(*replicas: ReplicaRecord) -> FakeRegistry:
    return FakeRegistry(replicas={r.id: r for r in replicas})


def test_the_largest_and_dearest_replica_of_each_model_bounds_its_requests() -> None:
    fake = registry(
        replica("big-1", "big", ("a", [0, 1, 2, 3])),
        replica("big-2", "big", ("h", [0, 1])),
        replica("across-1", "across", ("h", [0, 1]), ("a", [0, 1])),
        replica("one-1", "one", ("a", [5])),
    )
    sizes = ModelSizes(fake, RATES)
    assert sizes("big") == Size(4, 3.6)
    assert sizes("across") == Size(4, 3.6)  # every shard's GPUs count
    assert sizes("one") == Size(1, 1.8)


def test_a_cpu_engine_counts_as_one_device_of_class_cpu() -> None:
    sizes = ModelSizes(registry(replica("c-1", "c", ("h", []))), RATES)
    assert sizes("c") == Size(1, 0.5)


def test_gpus_nobody_reports_are_counted_but_priced_by_the_others_only() -> None:
    fake = registry(
        replica("gone-1", "gone", ("lost-node", [0, 1])),
        replica("odd-1", "odd", ("h", [0, 9])),  # node h reports no GPU 9
    )
    assert replica_gpus(fake.replicas["odd-1"], fake.nodes) == [("H100", "H100"), ("", "")]
    assert replica_gpus(fake.replicas["gone-1"], fake.nodes) == [("", ""), ("", "")]
    sizes = ModelSizes(fake, RATES)
    assert sizes("gone") == Size(2, 0.0)
    assert sizes("odd") == Size(2, 3.6)


def test_sizes_are_measured_again_only_when_the_registrys_replicas_change() -> None:
    fake = registry(replica("big-1", "big", ("a", [0, 1, 2, 3])))
    sizes = ModelSizes(fake, RATES)
    assert sizes("big") == Size(4, 1.8)
    fake.replicas = {"big-2": replica("big-2", "big", ("h", [0, 1]))}
    assert sizes("big") == Size(4, 1.8)  # same generation: the measure is kept
    fake.generation += 1
    assert sizes("big") == Size(2, 3.6)


def test_a_model_with_no_replica_holds_its_profiles_gpus_at_the_dearest_rate() -> None:
    fake = registry()
    fake.models = {"wide": model("wide", gpus_per_shard=2, nodes=3), "small": model("small", gpus_per_shard=1)}
    sizes = ModelSizes(fake, RATES)
    assert sizes("wide") == Size(6, 7.2)
    assert sizes("small") == Size(1, 7.2)
    assert sizes("not-configured") == Size(1, 7.2)
    assert ModelSizes(fake, ChargebackConfig())("small") == Size(1, 0.0)  # nothing priced


def test_without_sizes_a_model_is_taken_as_one_unpriced_gpu() -> None:
    b = GpuBudgets(FakeClock(NOON), "USD")
    assert b.ask("m", 100) == GpuUse(10.0, 0.0)  # 100 tokens at the default 10 per second
