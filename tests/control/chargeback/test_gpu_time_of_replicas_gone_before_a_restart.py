"""A replica that ran and went before its window settled is still charged after chargeback restarts (or another
server takes over): its span is in the store as soon as the leader sampled it, not only once its window is
charged, since the new chargeback's registry no longer holds the replica."""

from __future__ import annotations

from pathlib import Path

from llmgw.config.chargeback import ChargebackConfig
from llmgw.control.chargeback.chargeback import Chargeback
from llmgw.core.clock import FakeClock
from llmgw.core.conditions import Condition, ConditionType, Status
from llmgw.core.reasons import Reason
from llmgw.records.chargeback import OPERATOR
from llmgw.records.state import ReplicaRecord, ShardAssignment
from llmgw.store.base import UsageRecord
from tests.clusters import node
from tests.harness import plane_in

T0 = 1_800_000_000.0  # a multiple of the window
CFG = ChargebackConfig(rates={"H100": 36.0}, window=10, settle_after=5)


def replica(rid: str) -> ReplicaRecord:
    return ReplicaRecord(id=rid, model="m", created_at=T0, shards_expected=1, ready_at=T0,
                         assignments=[ShardAssignment(rank=0, node_id="n1", address="x", gpus=[0, 1])])


async def test_a_replica_gone_before_its_window_settled_is_charged_after_a_restart(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    p = plane_in(tmp_path, clock)
    await p.following.hold_lease()
    p.registry.node_reported(node("n1"))
    p.registry.adopt_replicas([replica("short"), replica("long")])
    p.store.add_usage([UsageRecord(key_id="A", model="m", replica_id="short", prompt_tokens=1, completion_tokens=1,
                                   started_at=T0 + 1, duration_s=1, status=200)])
    first = Chargeback(CFG, p.storage, p.leadership, p.registry, clock)
    clock.advance(1)
    assert await first.tick() == 0
    clock.advance(2)
    p.registry.adopt_replicas([replica("long")])  # "short" stopped and reaped at T0 + 3
    first.sample_now()
    assert await first.tick() == 0
    # the only control plane restarts: a new chargeback, a registry without "short"
    second = Chargeback(CFG, p.storage, p.leadership, p.registry, clock)
    clock.advance(12)
    assert await second.tick() == 1
    got = {(r.key_id, r.busy_s, r.load_s, r.idle_s) for r in p.store.charges_since(0)}
    # "long": 2 GPUs x 10 s, nobody served (the operator's at its end, still pending now); "short": 2 x 3 s
    assert got == {("A", 2.0, 0.0, 4.0)}
    assert sum(s.pending_s + s.pending_idle_s for s in p.store.open_spans(0)) == 20.0
    assert {s.id: s.ended_at for s in p.store.open_spans(0)} == {"short": T0 + 3, "long": None}
    assert OPERATOR not in {r.key_id for r in p.store.charges_since(0)}


async def test_a_replica_released_before_the_mark_ends_its_open_span_after_a_restart(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    p = plane_in(tmp_path, clock)
    await p.following.hold_lease()
    p.registry.node_reported(node("n1"))
    p.registry.adopt_replicas([replica("r1")])
    first = Chargeback(CFG, p.storage, p.leadership, p.registry, clock)
    clock.advance(25)
    assert await first.tick() == 2  # [T0, T0 + 20) charged, the span open in the store
    gone = [Condition(type=t, status=Status.TRUE, reason=Reason.ShardsGone, last_transition=T0 + 12)
            for t in (ConditionType.Failed, ConditionType.Released)]
    p.registry.adopt_replicas([replica("r1").model_copy(update={"conditions": gone})])  # kept on view, released
    second = Chargeback(CFG, p.storage, p.leadership, p.registry, clock)
    clock.advance(20)
    await second.tick()
    assert {s.id: s.ended_at for s in p.store.open_spans(0)} == {"r1": T0 + 12}
    assert sum(r.gpu_s for r in p.store.charges_since(0)) == 40.0, "no time past the mark for a released replica"
