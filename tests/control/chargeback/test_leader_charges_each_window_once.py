"""The leader's chargeback over the real SQLite store and a fake clock: each window charged once it has settled,
requests running across windows carried, spans following their replicas, nothing charged twice when another step
charged first, nothing at all on a follower."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from llmgw.config.chargeback import ChargebackConfig
from llmgw.control.chargeback.chargeback import Chargeback
from llmgw.control.plane import ControlPlane
from llmgw.control.storage.leadership import Leadership, holder_id
from llmgw.control.storage.storage import Storage
from llmgw.control.storage.writer import InlineWriter
from llmgw.core.clock import FakeClock
from llmgw.core.conditions import Condition, ConditionType, Status
from llmgw.core.reasons import Reason
from llmgw.records.chargeback import OPERATOR
from llmgw.records.state import ReplicaRecord, ShardAssignment
from llmgw.store.base import UsageRecord
from tests.clusters import node
from tests.harness import plane_in

T = TypeVar("T")
T0 = 1_800_000_000.0  # a multiple of the window and of an hour
CFG = ChargebackConfig(rates={"H100": 36.0}, window=10, settle_after=5)


@pytest.fixture
async def plane(tmp_path: Path) -> ControlPlane:
    p = plane_in(tmp_path, FakeClock(T0))
    await p.following.hold_lease()
    assert p.leadership.leading
    p.registry.node_reported(node("n1"))
    p.registry.adopt_replicas([replica()])
    return p


def replica(gpus: int = 2, ready: float | None = T0) -> ReplicaRecord:
    return ReplicaRecord(id="r1", model="m", created_at=T0, shards_expected=1, ready_at=ready,
                         assignments=[ShardAssignment(rank=0, node_id="n1", address="x", gpus=list(range(gpus)))])


def usage(key: str, start: float, dur: float) -> UsageRecord:
    return UsageRecord(key_id=key, model="m", replica_id="r1", prompt_tokens=1, completion_tokens=1,
                       started_at=start, duration_s=dur, status=200)


def chargeback_of(p: ControlPlane) -> Chargeback:
    return Chargeback(CFG, p.storage, p.leadership, p.registry, p.clock)


def charged(p: ControlPlane) -> dict[str, tuple[float, float, float]]:
    return {r.key_id: (r.busy_s, r.load_s, r.idle_s) for r in p.store.charges_since(0)}


def clock(p: ControlPlane) -> FakeClock:
    assert isinstance(p.clock, FakeClock)
    return p.clock


async def test_a_window_is_charged_once_it_has_settled_and_only_once(plane: ControlPlane) -> None:
    acc = chargeback_of(plane)
    plane.store.add_usage([usage("A", T0 + 1, 3)])
    clock(plane).advance(14.9)
    assert await acc.tick() == 0 and plane.store.charge_mark() == 0.0
    clock(plane).advance(0.1)
    assert await acc.tick() == 1
    assert plane.store.charge_mark() == T0 + 10
    assert charged(plane) == {"A": (6.0, 0.0, 14.0)}
    assert plane.store.charges_since(0)[0].cost == pytest.approx(20 * 36.0 / 3600)
    assert await acc.tick() == 0
    assert charged(plane) == {"A": (6.0, 0.0, 14.0)}
    (span,) = plane.store.open_spans(0)
    assert (span.gpus, span.gpu_class, span.demand, span.accounted_to) == (2, "H100", True, T0 + 10)


async def test_a_request_running_across_windows_is_carried_and_read_again_by_a_new_leader(
        plane: ControlPlane) -> None:
    plane.store.add_usage([usage("A", T0 + 8, 4)])
    clock(plane).advance(15)
    first = chargeback_of(plane)
    assert await first.tick() == 1
    clock(plane).advance(10)
    assert await first.tick() == 1
    carried = charged(plane)
    assert carried == {"A": (8.0, 0.0, 32.0)}
    assert [r.hour for r in plane.store.charges_since(0)] == [int(T0 // 3600)]
    clock(plane).advance(10)
    again = chargeback_of(plane)  # a new leader: the mark, the spans and the records in flight read from the store
    assert await again.tick() == 1
    assert charged(plane) == {"A": (8.0, 0.0, 52.0)}


async def test_a_request_started_in_a_later_window_is_charged_in_it(plane: ControlPlane) -> None:
    acc = chargeback_of(plane)
    clock(plane).advance(15)
    assert await acc.tick() == 1  # the first window: nobody
    plane.store.add_usage([usage("A", T0 + 12, 2)])
    clock(plane).advance(10)
    assert await acc.tick() == 1
    assert charged(plane)["A"][0] == 4.0  # 2 GPUs for 2 s


async def test_a_request_running_longer_than_settle_after_is_carried_through_every_window(
        plane: ControlPlane) -> None:
    plane.store.add_usage([usage("A", T0 + 1, 20)])  # landed before its windows were charged (a leader behind)
    acc = chargeback_of(plane)
    for _ in range(3):
        clock(plane).advance(10 if plane.store.charge_mark() else 15)
        assert await acc.tick() == 1
    assert charged(plane)["A"][0] == 40.0  # 2 GPUs for its 20 s, over three windows


async def test_nothing_is_charged_twice_when_another_step_accounted_first(plane: ControlPlane) -> None:
    acc = chargeback_of(plane)
    plane.store.add_usage([usage("A", T0, 1)])
    clock(plane).advance(15)
    assert await acc.tick() == 1
    plane.store.put_charges([], [], T0 + 10, T0 + 20, plane.leadership.epoch)  # another step took the next window
    clock(plane).advance(10)
    assert await acc.tick() == 0, "a refused step must write nothing"
    assert plane.store.charge_mark() == T0 + 20
    clock(plane).advance(10)
    assert await acc.tick() == 1
    assert plane.store.charge_mark() == T0 + 30
    assert sum(r.gpu_s for r in plane.store.charges_since(0)) == 2 * 20.0


async def test_a_follower_charges_nothing(plane: ControlPlane) -> None:
    follower = Leadership(holder_id(), 10.0)  # a server that never took the lease
    acc = Chargeback(CFG, plane.storage, follower, plane.registry, plane.clock)
    clock(plane).advance(60)
    assert await acc.tick() == 0
    assert plane.store.charge_mark() == 0.0 and plane.store.charges_since(0) == []


async def test_a_replica_gone_ends_its_span_and_its_unused_load_is_the_operators(plane: ControlPlane) -> None:
    plane.registry.adopt_replicas([replica(ready=None)])
    acc = chargeback_of(plane)
    clock(plane).advance(4)
    assert await acc.tick() == 0
    plane.registry.adopt_replicas([])
    assert await acc.tick() == 0  # seen gone: its span ends now
    clock(plane).advance(11)
    assert await acc.tick() == 1
    assert charged(plane) == {OPERATOR: (0.0, 8.0, 0.0)}
    (span,) = plane.store.open_spans(0)
    assert span.ended_at == T0 + 4 and span.pending_s == 0.0
    clock(plane).advance(10)
    await acc.tick()
    assert charged(plane) == {OPERATOR: (0.0, 8.0, 0.0)}, "a span's time past its end must not be charged"


async def test_a_sleep_seen_in_the_registry_is_not_charged(plane: ControlPlane) -> None:
    acc = chargeback_of(plane)
    plane.store.add_usage([usage("A", T0, 1)])
    clock(plane).advance(2)
    plane.registry.adopt_replicas([replica().model_copy(update={"sleep_level": 1, "slept_at": T0 + 2})])
    await acc.tick()
    clock(plane).advance(4)
    plane.registry.adopt_replicas([replica().model_copy(update={"woken_at": T0 + 6})])
    plane.store.add_usage([usage("B", T0 + 7, 1)])
    clock(plane).advance(9)
    assert await acc.tick() == 1
    assert charged(plane) == {"A": (2.0, 0.0, 2.0), "B": (2.0, 2.0, 4.0)}


async def test_a_replica_is_charged_from_its_placement_not_from_when_it_was_asked_for(plane: ControlPlane) -> None:
    placed = Condition(type=ConditionType.Scheduled, status=Status.TRUE, reason=Reason.Placed, last_transition=T0 + 3)
    plane.registry.adopt_replicas([replica().model_copy(update={"conditions": [placed], "ready_at": T0 + 3})])
    plane.store.add_usage([usage("A", T0 + 5, 1)])
    acc = chargeback_of(plane)
    clock(plane).advance(15)
    assert await acc.tick() == 1
    assert charged(plane) == {"A": (2.0, 0.0, 12.0)}


class PassDuringWrite(InlineWriter):
    """A writer during whose write a reconcile pass samples the registry, as the server's writer thread allows."""

    def __init__(self, during: Callable[[], None]) -> None:
        self.during = during

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        self.during()
        return fn(*args)


async def test_what_a_pass_samples_while_a_step_is_written_is_kept(plane: ControlPlane) -> None:
    acc: Chargeback | None = None

    def replica_gone() -> None:
        assert acc is not None
        plane.registry.adopt_replicas([])
        acc.sample_now()

    storage = Storage(plane.store, PassDuringWrite(replica_gone), plane.clock, shared=False)
    acc = Chargeback(CFG, storage, plane.leadership, plane.registry, plane.clock)
    clock(plane).advance(15)
    assert await acc.tick() == 1
    clock(plane).advance(20)
    await acc.tick()
    (span,) = plane.store.open_spans(0)
    assert span.ended_at == T0 + 15, "the end a pass saw while the step was written was lost"
