"""Each replica's span as chargeback samples it from the registry (control/chargeback/chargeback.py): who pays its
load and idle time, what its GPUs are priced as, its first readiness, sleeps, wakes and end; no span for a replica
that holds nothing or was charged whole. Spans that sampling changed are in the store before their window is
charged."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmgw.config.chargeback import ChargebackConfig
from llmgw.control.chargeback.chargeback import Chargeback, follow, span_of
from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.core.conditions import Condition, ConditionType, Status
from llmgw.core.reasons import Reason
from llmgw.records.chargeback import ReplicaSpan
from llmgw.records.state import ReplicaRecord, ShardAssignment
from tests.clusters import model, node
from tests.harness import plane_in

T0 = 1_800_000_000.0  # a multiple of the window
CFG = ChargebackConfig(rates={"H100": 36.0}, window=10, settle_after=5)


def replica(rid: str, model_name: str = "m", *, node_id: str = "n1", gpus: tuple[int, ...] = (0, 1),
            placed: bool = True, **update: object) -> ReplicaRecord:
    r = ReplicaRecord(id=rid, model=model_name, created_at=T0, shards_expected=1, ready_at=T0,
                      assignments=[ShardAssignment(rank=0, node_id=node_id, address="x", gpus=list(gpus))]
                      if placed else [])
    return r.model_copy(update=update)


def released_at(t: float) -> list[Condition]:
    return [Condition(type=c, status=Status.TRUE, reason=Reason.ShardsGone, message="", last_transition=t)
            for c in (ConditionType.Failed, ConditionType.Released)]


def clock(p: ControlPlane) -> FakeClock:
    assert isinstance(p.clock, FakeClock)
    return p.clock


@pytest.fixture
async def plane(tmp_path: Path) -> ControlPlane:
    p = plane_in(tmp_path, FakeClock(T0))
    await p.following.hold_lease()
    p.registry.node_reported(node("n1", cls="H100"))
    return p


def test_a_span_is_paid_for_by_its_users_only_when_its_model_is_loaded_on_demand() -> None:
    nodes = {"n1": node("n1", cls="H100")}
    assert span_of(replica("r1"), nodes, model("m", min_=0), CFG).demand
    assert span_of(replica("r1"), nodes, None, CFG).demand  # removed from the catalog
    assert not span_of(replica("r1"), nodes, model("m", min_=1), CFG).demand


def test_a_spans_gpus_are_priced_by_the_gpus_their_node_reports() -> None:
    nodes = {"n1": node("n1", cls="H100")}
    s = span_of(replica("r1", gpus=(0, 9)), nodes, None, CFG)  # n1 reports no GPU 9
    assert (s.gpus, s.gpu_class) == (2, "H100")
    s = span_of(replica("r1", node_id="gone"), nodes, None, CFG)
    assert (s.gpus, s.gpu_class) == (2, "cpu")


def test_a_span_keeps_its_first_readiness_and_follows_sleeps_and_wakes() -> None:
    s = ReplicaSpan(id="r1", model="m", gpus=2, gpu_class="H100", demand=True, created_at=T0)
    follow(s, replica("r1", ready_at=T0 + 5), T0 + 6)
    asleep = replica("r1", ready_at=None, sleep_level=1, slept_at=T0 + 20)  # a sleep clears the record's ready_at
    follow(s, asleep, T0 + 21)
    follow(s, asleep, T0 + 22)  # sampled again, still asleep: one sleep
    assert s.ready_at == T0 + 5 and s.asleep == [(T0 + 20, None)]
    # woken, the record's woken_at an earlier wake's: the wake is taken as now
    follow(s, replica("r1", ready_at=None, woken_at=T0 + 1), T0 + 30)
    follow(s, replica("r1", ready_at=T0 + 35, sleep_level=2, slept_at=T0 + 40), T0 + 41)
    follow(s, replica("r1", ready_at=None, woken_at=T0 + 50), T0 + 52)
    assert s.ready_at == T0 + 5
    assert s.asleep == [(T0 + 20, T0 + 30), (T0 + 40, T0 + 50)]


async def test_a_span_is_sampled_for_each_placed_replica_not_charged_whole(plane: ControlPlane) -> None:
    plane.registry.start(plane.clock.now(), [model("kept", min_=1)], [])  # the catalog, as the store holds it
    plane.store.put_charges([], [], 0.0, T0 + 100, plane.leadership.epoch)  # charged up to T0 + 100
    plane.registry.adopt_replicas([
        replica("waiting", placed=False),
        replica("done", conditions=released_at(T0 + 100)),
        replica("gone-later", conditions=released_at(T0 + 150)),
        replica("kept-1", "kept"),
    ])
    cb = Chargeback(CFG, plane.storage, plane.leadership, plane.registry, plane.clock)
    assert await cb.tick() == 0  # nothing settled: the spans sampled are written alone
    spans = {s.id: s for s in plane.store.open_spans(0)}
    assert sorted(spans) == ["gone-later", "kept-1"]
    assert spans["gone-later"].ended_at == T0 + 150
    assert not spans["kept-1"].demand


async def test_sampling_before_the_first_tick_waits_for_it(plane: ControlPlane) -> None:
    plane.registry.adopt_replicas([replica("r1")])
    cb = Chargeback(CFG, plane.storage, plane.leadership, plane.registry, plane.clock)
    cb.sample_now()  # nothing read from the store yet: nothing sampled, nothing raised
    assert await cb.tick() == 0


async def test_a_sleep_and_a_wake_sampled_are_in_the_store_before_their_window_is_charged(
        plane: ControlPlane) -> None:
    plane.registry.adopt_replicas([replica("r1")])
    cb = Chargeback(CFG, plane.storage, plane.leadership, plane.registry, plane.clock)
    assert await cb.tick() == 0
    plane.registry.adopt_replicas([replica("r1", ready_at=None, sleep_level=1, slept_at=T0 + 1)])
    assert await cb.tick() == 0
    assert [s.asleep for s in plane.store.open_spans(0)] == [[(T0 + 1, None)]]
    clock(plane).advance(3)
    plane.registry.adopt_replicas([replica("r1")])  # awake, no wake time recorded: woken when sampled
    assert await cb.tick() == 0
    assert [s.asleep for s in plane.store.open_spans(0)] == [[(T0 + 1, T0 + 3)]]


async def test_a_fresh_cluster_with_nothing_to_charge_ticks_quietly(plane: ControlPlane) -> None:
    cb = Chargeback(CFG, plane.storage, plane.leadership, plane.registry, plane.clock)
    clock(plane).advance(3600)
    assert await cb.tick() == 0
    assert plane.store.charge_mark() == 0.0


async def test_a_sleep_sampled_while_a_window_is_written_is_kept(plane: ControlPlane) -> None:
    """A window is charged on copies of the spans and written to the store; a reconcile pass may sample the live
    spans meanwhile (a replica put to sleep, woken, first ready). What it sampled then must survive the step: a lost
    sleep made one user's residency run on through the next user's (a CI run: key a charged 26.3 GPU-s for 20.1)."""
    cb = plane.chargeback
    live = ReplicaSpan(id="r1", model="m", gpus=2, gpu_class="H100", demand=True, created_at=T0)
    cb._spans = {"r1": live}
    stepped = live.model_copy(deep=True)  # what the step charged and wrote, taken before the pass
    follow(live, replica("r1", ready_at=T0 + 5), T0 + 6)  # the pass, while the write was under way
    follow(live, replica("r1", ready_at=None, sleep_level=1, slept_at=T0 + 20), T0 + 21)
    merged = cb._merged([stepped], T0 + 10)
    assert merged["r1"].asleep == [(T0 + 20, None)] and merged["r1"].ready_at == T0 + 5
    # a wake sampled meanwhile closes the sleep the step had carried open
    stepped = merged["r1"].model_copy(deep=True)
    cb._spans = merged
    follow(merged["r1"], replica("r1", ready_at=None, woken_at=T0 + 30), T0 + 31)
    assert cb._merged([stepped], T0 + 20)["r1"].asleep == [(T0 + 20, T0 + 30)]
