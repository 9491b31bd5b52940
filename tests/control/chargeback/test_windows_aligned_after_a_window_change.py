"""A server restarted with another `chargeback.window` goes on from the mark with windows aligned to multiples of the
new length (the first one shortened to the next boundary), so that no window crosses an hour and puts its time in
the wrong hour's charges."""

from __future__ import annotations

from pathlib import Path

from llmgw.config.chargeback import ChargebackConfig
from llmgw.control.chargeback.chargeback import Chargeback
from llmgw.core.clock import FakeClock
from llmgw.records.state import ReplicaRecord, ShardAssignment
from llmgw.store.base import UsageRecord
from tests.clusters import node
from tests.harness import plane_in

T0 = 1_800_000_000.0  # a multiple of an hour


async def test_a_new_window_length_realigns_windows_at_the_mark(tmp_path: Path) -> None:
    clock = FakeClock(T0 + 3600 - 20)
    p = plane_in(tmp_path, clock)
    await p.following.hold_lease()
    p.registry.node_reported(node("n1"))
    p.registry.adopt_replicas([ReplicaRecord(id="r1", model="m", created_at=T0, shards_expected=1, ready_at=T0,
                                             assignments=[ShardAssignment(rank=0, node_id="n1", address="x",
                                                                          gpus=[0])])])
    p.store.add_usage([UsageRecord(key_id="A", model="m", replica_id="r1", prompt_tokens=1, completion_tokens=1,
                                   started_at=T0, duration_s=1, status=200)])  # it served A: its idle time is A's
    tens = Chargeback(ChargebackConfig(window=10, settle_after=0), p.storage, p.leadership, p.registry, clock)
    await tens.tick()
    clock.advance(10)  # the last 10 s of the hour are not charged yet
    while await tens.tick():
        pass
    assert p.store.charge_mark() == T0 + 3600 - 10
    twenties = Chargeback(ChargebackConfig(window=20, settle_after=0), p.storage, p.leadership, p.registry, clock)
    clock.advance(50)
    await twenties.tick()
    assert p.store.charge_mark() == T0 + 3600 + 40, "windows go on from multiples of the new length"
    by_hour: dict[int, float] = {}
    for r in p.store.charges_since(0):
        by_hour[r.hour] = by_hour.get(r.hour, 0.0) + r.gpu_s
    assert by_hour == {int(T0 // 3600): 3600.0, int(T0 // 3600) + 1: 40.0}
