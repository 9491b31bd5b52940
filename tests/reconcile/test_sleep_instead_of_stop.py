"""An idle on-demand replica whose model has a sleep block sleeps instead of stopping: Ready False reason Sleeping,
its GPUs free for placement; a request wakes it; it stops for good after stop_after, when another takes its GPUs,
or when it cannot sleep (pinned, no room in the node's host memory share for sleepers). Pure, with a fake clock."""

from __future__ import annotations

from llmgw.config.server import ModelSpec
from llmgw.config.serving import SleepConfig
from llmgw.control.nodes.desired import desired_for
from llmgw.control.nodes.watch import shard_digests
from llmgw.core.reasons import Reason
from llmgw.reconcile.sleep_intents import Sleep, Wake
from llmgw.reconcile.world import Timings
from llmgw.records.state import Phase, replica_phase
from tests.clusters import GiB, model, node
from tests.reconcile.harness import T0, Sim

IDLE = 600.0


def sleepy(name: str = "od", *, gpus: int = 8, pinned: bool = False, **sleep: object) -> ModelSpec:
    m = model(name, min_=0, max_=1, idle=IDLE, gpus_per_shard=gpus, source=f"/models/{name}")
    return m.model_copy(update={"sleep": SleepConfig.model_validate(sleep), "pinned": pinned})


def loaded(*models: ModelSpec, nodes: int = 1) -> tuple[Sim, str]:
    sim = Sim(models, [node(f"n{i + 1}") for i in range(nodes)], timings=Timings(demand_window=60.0))
    sim.demand[models[0].name] = sim.now
    sim.step()
    sim.advance(10)
    sim.heartbeat()
    sim.step()
    (r,) = sim.live(models[0].name)
    assert r.ready
    return sim, r.id


def asleep_beat(sim: Sim) -> None:
    """The agents report: a sleeper's engine says "sleeping", the rest "ready"."""
    sim.heartbeat(overrides={(r.id, 0): "sleeping" for r in sim.replicas.values() if r.sleep_level})


def idle_out(sim: Sim) -> None:
    sim.advance(IDLE + 1)
    asleep_beat(sim)
    sim.step()


def test_an_idle_replica_sleeps_instead_of_stopping_and_a_request_wakes_it() -> None:
    sim, rid = loaded(sleepy())
    idle_out(sim)
    r = sim.replicas[rid]
    assert r.stop is None and r.sleep_level == 1 and not r.ready and r.endpoint == ""
    assert sim.ready_reason(r) == Reason.Sleeping and replica_phase(r) == Phase.Sleeping
    (shard,) = desired_for("n1", list(sim.replicas.values()), sim.models, ["sim"], 5.0).shards
    assert (shard.sleep, shard.can_sleep) == (1, True)
    assert any("asleep at level 1: unused for 601s" in e for e in sim.events)
    sim.run(3000, overrides={(rid, 0): "sleeping"})
    assert sim.replicas[rid].sleep_level == 1 and sim.live("od") == [sim.replicas[rid]], "no stop, no new replica"
    sim.demand["od"] = sim.now  # a request found no ready replica
    out = sim.step()
    assert Wake(rid) in out and sim.replicas[rid].sleep_level == 0 and len(sim.live("od")) == 1
    sim.advance(2)
    sim.heartbeat()
    sim.step()
    assert sim.replicas[rid].ready and replica_phase(sim.replicas[rid]) == Phase.Ready


def test_an_engine_still_saying_ready_after_the_sleep_is_not_routed_to() -> None:
    sim, rid = loaded(sleepy())
    idle_out(sim)
    sim.heartbeat()  # the agent has not yet been told: its engine still says ready
    sim.step()
    r = sim.replicas[rid]
    assert not r.ready and r.endpoint == "" and sim.ready_reason(r) == Reason.Sleeping


def test_a_sleeper_stops_for_good_after_stop_after() -> None:
    sim, rid = loaded(sleepy(stop_after=1800))
    idle_out(sim)
    sim.run(1795, overrides={(rid, 0): "sleeping"})
    assert sim.replicas[rid].stop is None
    sim.run(10, overrides={(rid, 0): "sleeping"})
    assert rid not in sim.replicas or sim.replicas[rid].stop is not None
    assert sim.live("od") == []


def test_its_gpus_are_free_for_another_model_and_it_stops_when_they_are_taken() -> None:
    big = model("big", min_=0, max_=1, gpus_per_shard=8, source="/models/big")
    sim, rid = loaded(sleepy(), big)  # one node of eight GPUs: all of them the sleeper's while it is awake
    idle_out(sim)
    sim.demand["big"] = sim.now
    asleep_beat(sim)
    sim.step()
    (placed,) = sim.live("big")
    assert placed.placed and placed.assignments[0].gpus == sim.replicas[rid].assignments[0].gpus
    r = sim.replicas[rid]
    assert r.stop is not None and r.stop.reason == Reason.Evicted and r.stop.for_model == "big"


def test_a_pinned_model_is_never_put_to_sleep() -> None:
    sim, rid = loaded(sleepy(pinned=True))
    idle_out(sim)
    r = sim.replicas[rid]
    assert r.sleep_level == 0 and r.stop is not None and r.stop.reason == Reason.Idle


def test_a_node_without_room_in_its_host_memory_share_stops_it_instead() -> None:
    sim, rid = loaded(sleepy(host_memory=300 * GiB))  # half of the node's 512 GiB is 256 GiB for sleepers
    idle_out(sim)
    r = sim.replicas[rid]
    assert r.sleep_level == 0 and r.stop is not None and r.stop.reason == Reason.Idle
    sim2, rid2 = loaded(sleepy(host_memory=200 * GiB))
    idle_out(sim2)
    assert sim2.replicas[rid2].sleep_level == 1
    sim3, rid3 = loaded(sleepy(host_memory=300 * GiB, level=2))  # level 2 keeps no weights in host memory
    idle_out(sim3)
    assert sim3.replicas[rid3].sleep_level == 2


def test_a_woken_replica_stays_awake_its_minimum_stay() -> None:
    sim, rid = loaded(sleepy(min_stay=900))  # longer than its idle timeout
    sim.last_used[rid] = sim.now
    sim.run(895)
    assert sim.replicas[rid].sleep_level == 0, "idle, but not yet awake its minimum stay"
    sim.run(10)
    assert sim.replicas[rid].sleep_level == 1
    sim.demand["od"] = sim.now
    sim.step()
    sim.advance(1)
    sim.heartbeat()
    sim.step()
    assert sim.replicas[rid].ready
    sim.demand.clear()  # the request that woke it never reached it: its last use is from before it slept
    sim.run(895)
    assert sim.replicas[rid].ready and sim.replicas[rid].sleep_level == 0
    sim.run(10)
    assert sim.replicas[rid].sleep_level == 1
    assert sum(isinstance(i, Sleep) and i.replica_id == rid for i in sim.intents) == 2


def test_a_woken_replica_is_not_put_back_to_sleep_before_the_request_that_woke_it_arrives() -> None:
    sim, rid = loaded(sleepy(min_stay=0))
    sim.last_used[rid] = sim.now
    idle_out(sim)
    sim.demand["od"] = sim.now
    sim.step()
    sim.advance(1)
    sim.heartbeat()
    sim.step()
    assert sim.replicas[rid].ready
    sim.demand.clear()
    sim.run(IDLE - 10)  # its last use is from before it slept: the idle timer runs from the wake
    assert sim.replicas[rid].ready


def test_a_sleep_or_a_wake_changes_the_nodes_watch_digest() -> None:
    """The agent hears of it at once (its watch answers), not at its next heartbeat: a wake has a request waiting."""
    sim, _ = loaded(sleepy())
    awake = shard_digests(sim.replicas.values())["n1"]
    idle_out(sim)
    asleep = shard_digests(sim.replicas.values())["n1"]
    assert asleep != awake
    sim.demand["od"] = sim.now
    sim.step()
    assert shard_digests(sim.replicas.values())["n1"] == awake


def test_a_replica_on_an_agent_older_than_sleep_stops_instead() -> None:
    """An agent before wire version 12 is never told to sleep (the field is stripped for it): its engine would stay
    awake while its GPUs were given to another."""
    sim, rid = loaded(sleepy())
    rec = sim.nodes["n1"]
    sim.nodes["n1"] = rec.model_copy(update={"report": rec.report.model_copy(update={"version": 11})})
    idle_out(sim)
    r = sim.replicas[rid]
    assert r.sleep_level == 0 and r.stop is not None and r.stop.reason == Reason.Idle


def test_a_shard_that_could_not_free_its_memory_fails_with_the_reason_and_is_not_replaced() -> None:
    sim, rid = loaded(sleepy())
    idle_out(sim)
    sim.heartbeat(overrides={(rid, 0): "failed"})
    rec = sim.nodes["n1"]
    (shard,) = rec.report.shards
    said = shard.model_copy(update={"reason": "SleepFailed", "message": "GPU memory not freed after sleep"})
    sim.nodes["n1"] = rec.model_copy(update={"report": rec.report.model_copy(update={"shards": [said]})})
    sim.step()
    r = sim.replicas.get(rid)
    assert r is None or (r.failed and sim.ready_reason(r) == Reason.SleepFailed)
    assert any("GPU memory not freed after sleep" in e for e in sim.events), sim.events
    sim.run(60)
    assert sim.live("od") == [], "idle and not asked for: nothing replaces it"


def test_an_idle_replica_whose_engine_does_not_serve_stops_instead() -> None:
    """The agent puts only a serving engine to sleep: one recorded asleep that never slept would hold the GPUs
    counted free."""
    sim, rid = loaded(sleepy())
    sim.advance(IDLE + 1)
    sim.heartbeat(overrides={(rid, 0): "starting"})
    sim.step()
    r = sim.replicas[rid]
    assert r.sleep_level == 0 and r.stop is not None and r.stop.reason == Reason.Idle


def test_the_node_share_for_sleepers_counts_those_already_asleep_there() -> None:
    """Two level-1 sleepers of 200 GiB each do not fit the 256 GiB share of one node: the second stops instead."""
    a, b = (sleepy(n, gpus=4, host_memory=200 * GiB) for n in ("a", "b"))
    sim = Sim([a, b], [node("n1")], timings=Timings(demand_window=60.0))
    sim.demand.update({"a": sim.now, "b": sim.now})
    sim.step()
    sim.advance(10)
    sim.heartbeat()
    sim.step()
    assert all(r.ready for r in sim.replicas.values()) and len(sim.replicas) == 2
    idle_out(sim)
    levels = sorted((r.sleep_level, r.stop is not None) for r in sim.replicas.values())
    assert levels == [(0, True), (1, False)], levels


def test_a_slow_wake_outlasting_the_demand_window_is_not_stopped_as_idle() -> None:
    """A level-2 wake reloads the weights and may take longer than the demand window; its last use is from before
    it slept. Stopped as idle mid-wake, the request that woke it would wait out load_wait for nothing."""
    sim, rid = loaded(sleepy(level=2))
    idle_out(sim)
    sim.run(3000, overrides={(rid, 0): "sleeping"})
    sim.demand["od"] = sim.now
    assert Wake(rid) in sim.step()
    sim.run(120, overrides={(rid, 0): "sleeping"})  # the engine still reloading its weights
    r = sim.replicas[rid]
    assert r.stop is None and r.sleep_level == 0, "stopped mid-wake"
    sim.heartbeat()
    sim.step()
    assert sim.replicas[rid].ready


def test_a_sleeper_of_a_model_made_promised_is_woken_or_replaced() -> None:
    """A model given min: 1 (and so no sleep block) while its replica sleeps: that replica is no longer one that may
    sleep, and a promise is not kept by a sleeper."""
    sim, rid = loaded(sleepy())
    idle_out(sim)
    assert sim.replicas[rid].sleep_level == 1
    sim.models["od"] = model("od", min_=1, max_=1, idle=IDLE, gpus_per_shard=8, source="/models/od")
    sim.run(30, overrides={(r, 0): "sleeping" for r in [rid] if sim.replicas[rid].sleep_level})
    sim.heartbeat()
    sim.step()
    assert [r.ready for r in sim.live("od")] == [True], sim.live("od")


def test_scaling_on_load_wakes_a_sleeper_rather_than_being_held_back_by_it() -> None:
    """A sleeper counts among its model's replicas up to max: with the load back above the target, it wakes (it
    would otherwise hold the step up back for as long as it sleeps)."""
    m = sleepy(gpus=4)
    m = m.model_copy(update={"scaling": m.scaling.model_copy(update={
        "max": 2, "target_in_flight": 4, "scale_up_after": 30.0, "scale_down_after": 100000.0})})
    sim, a = loaded(m)
    sim.outstanding[a] = 10
    sim.run(40)
    (b,) = [r.id for r in sim.live("od") if r.id != a]
    sim.outstanding[a] = 6  # within the target for two: the second goes idle and sleeps
    while not sim.replicas[b].sleep_level:
        assert sim.now < T0 + 2000, sim.replicas[b]
        sim.last_used[a] = sim.now
        asleep_beat(sim)
        sim.advance(10)
        sim.step()
    sim.outstanding[a] = 12  # above the target for one
    for _ in range(10):
        sim.last_used[a] = sim.now
        sim.advance(5)
        asleep_beat(sim)
        sim.step()
    assert any(isinstance(i, Wake) and i.replica_id == b for i in sim.intents), sim.live("od")


def test_a_level_one_sleeper_of_unknown_size_sleeps_alone_on_its_node() -> None:
    """No host_memory, no size in the catalog: what it pins in host memory is unknown, so it is counted as the
    node's whole share for sleepers. The first sleeps; the second stops instead (before, 0 meant no cap, and any
    number of sleepers could pin a node's RAM)."""
    a, b = (sleepy(n, gpus=4) for n in ("a", "b"))
    assert a.sleep is not None and a.sleep.host_memory is None
    sim = Sim([a, b], [node("n1")], timings=Timings(demand_window=60.0))
    sim.demand.update({"a": sim.now, "b": sim.now})
    sim.step()
    sim.advance(10)
    sim.heartbeat()
    sim.step()
    idle_out(sim)
    levels = sorted((r.sleep_level, r.stop is not None) for r in sim.replicas.values())
    assert levels == [(0, True), (1, False)], levels


def test_a_sleeper_without_host_memory_is_counted_at_its_weights_size() -> None:
    """A URL source's size is what it holds asleep: two of 100 GiB fit the 256 GiB share, three do not."""
    models = [sleepy(n, gpus=2).model_copy(update={"source": f"https://weights.example/{n}.gguf",
                                                     "size": 100 * GiB}) for n in ("a", "b", "c")]
    sim = Sim(models, [node("n1")], timings=Timings(demand_window=60.0))
    sim.demand.update({m.name: sim.now for m in models})
    sim.step()
    sim.advance(10)
    sim.heartbeat()
    sim.step()
    assert all(r.ready for r in sim.replicas.values()) and len(sim.replicas) == 3
    idle_out(sim)
    levels = sorted((r.sleep_level, r.stop is not None) for r in sim.replicas.values())
    assert levels == [(0, True), (1, False), (1, False)], levels
