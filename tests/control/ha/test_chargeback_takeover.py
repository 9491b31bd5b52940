"""GPU time charged across a change of leader on one PostgreSQL store: the new leader goes on from the mark the
last one wrote, and a deposed leader that still believes it leads has its step refused by the store's fence, so
no window is charged twice or skipped."""

from __future__ import annotations

from llmgw.config.chargeback import ChargebackConfig
from llmgw.control.chargeback.chargeback import Chargeback
from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.records.state import ReplicaRecord, ShardAssignment
from llmgw.store.base import UsageRecord
from tests.control.ha.conftest import LEASE

CFG = ChargebackConfig(window=10, settle_after=5)


def chargeback_of(p: ControlPlane) -> Chargeback:
    return Chargeback(CFG, p.storage, p.leadership, p.registry, p.clock)


async def test_a_new_leader_goes_on_from_the_mark_and_a_deposed_one_writes_nothing(
        two: tuple[ControlPlane, ControlPlane, FakeClock]) -> None:
    a, b, clock = two
    t0 = (clock.now() // 10) * 10
    assert a.leadership.leading and not b.leadership.leading
    a.registry.adopt_replicas([ReplicaRecord(
        id="r1", model="m", created_at=t0, ready_at=t0, shards_expected=1,
        assignments=[ShardAssignment(rank=0, node_id="n1", address="x", gpus=[0, 1])])])
    a.store.add_usage([UsageRecord(key_id="k", model="m", replica_id="r1", prompt_tokens=1, completion_tokens=1,
                                   started_at=t0, duration_s=1.0, status=200)])
    old = chargeback_of(a)
    clock.advance(t0 + 15 - clock.now())
    assert await old.tick() == 1
    clock.advance(LEASE + 1)  # a is paused past its lease; b takes over
    await b.following.hold_lease()
    assert b.leadership.leading and a.leadership.leading  # a has not noticed yet
    clock.advance(t0 + 25 - clock.now())
    assert await old.tick() == 0, "a deposed leader's step was written"
    assert b.store.charge_mark() == t0 + 10
    new = chargeback_of(b)
    assert await new.tick() == 1
    assert b.store.charge_mark() == t0 + 20
    rows = b.store.charges_since(0)
    assert [(r.key_id, r.busy_s, r.idle_s) for r in rows] == [("k", 2.0, 38.0)], "each window charged once, whole"
