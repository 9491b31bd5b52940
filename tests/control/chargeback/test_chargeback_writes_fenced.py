"""Chargeback's writes are fenced by the epoch its server leads at: a leader deposed without knowing it (paused
past its lease) writes neither charges nor spans, and starts again from the store. Its loop goes on after any
error, forgetting what it carried."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from llmgw.config.chargeback import ChargebackConfig
from llmgw.control.chargeback import chargeback as chargeback_module
from llmgw.control.chargeback.chargeback import Chargeback, chargeback_loop
from llmgw.control.storage.leadership import Leadership, holder_id
from llmgw.core.clock import FakeClock
from llmgw.core.errors import StoreError
from llmgw.records.state import ReplicaRecord, ShardAssignment
from tests.clusters import node
from tests.harness import plane_in

T0 = 1_800_000_000.0  # a multiple of the window
CFG = ChargebackConfig(rates={"H100": 36.0}, window=10, settle_after=5)


async def test_a_deposed_leader_writes_no_charge_and_no_span(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    p = plane_in(tmp_path, clock)
    await p.following.hold_lease()
    assert p.leadership.epoch is not None
    p.registry.node_reported(node("n1", cls="H100"))
    p.registry.adopt_replicas([ReplicaRecord(id="r1", model="m", created_at=T0, shards_expected=1, ready_at=T0,
                                             assignments=[ShardAssignment(rank=0, node_id="n1", address="x",
                                                                          gpus=[0])])])
    stale = Leadership(holder_id(), 10.0, epoch=p.leadership.epoch - 1)  # it led before the lease moved on
    cb = Chargeback(CFG, p.storage, stale, p.registry, clock)
    clock.advance(1)
    assert await cb.tick() == 0  # only a new span to write: refused
    assert p.store.open_spans(0) == []
    clock.advance(30)
    assert await cb.tick() == 0  # a settled window: refused
    assert p.store.charge_mark() == 0.0 and p.store.charges_since(0) == [] and p.store.open_spans(0) == []


class Failing(Chargeback):
    """A chargeback whose store fails, then whose code does, then is cancelled (the server stopping)."""

    def __init__(self) -> None:
        self.ticks = self.forgotten = 0

    async def tick(self) -> int:
        self.ticks += 1
        if self.ticks == 1:
            raise StoreError("store unreachable")
        if self.ticks == 2:
            raise RuntimeError("a bug")
        raise asyncio.CancelledError

    def forget(self) -> None:
        self.forgotten += 1


async def test_the_loop_goes_on_after_a_store_error_and_a_bug_forgetting_what_it_carried(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chargeback_module, "SAMPLE_EVERY_S", 0.0)
    cb = Failing()
    with pytest.raises(asyncio.CancelledError):
        await chargeback_loop(cb)
    assert (cb.ticks, cb.forgotten) == (3, 2)
