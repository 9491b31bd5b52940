"""min 0 with max above it loads on demand and stops when idle; min 0 max 0, or no scaling stanza, stays off."""

from __future__ import annotations

from llmgw.config.server import ModelSpec
from llmgw.core.reasons import Reason
from llmgw.reconcile.world import Timings
from llmgw.records.state import ReplicaRecord
from tests.clusters import model, node
from tests.reconcile.harness import Sim

IDLE = 600.0


def idle_stopped(r: ReplicaRecord) -> bool:
    return r.stop is not None and r.stop.reason == Reason.Idle


def _sim(*models: ModelSpec) -> Sim:
    return Sim(models, [node("n1"), node("n2")], timings=Timings(demand_window=60.0))


def _load(sim: Sim, name: str) -> str:
    """Ask for the model, let it load, and return the ready replica's id."""
    sim.demand[name] = sim.now
    sim.step()
    (r,) = sim.live(name)
    assert r.placed
    sim.advance(10)
    sim.heartbeat()
    sim.step()
    assert sim.replicas[r.id].ready
    return r.id


def test_min_0_max_n_loads_only_when_asked_and_then_only_one() -> None:
    sim = _sim(model("od", min_=0, max_=3))
    sim.run(300)
    assert sim.of("od") == [], "nobody asked"
    sim.demand["od"] = sim.now
    sim.step()
    reps = sim.of("od")
    assert len(reps) == 1 and reps[0].placed
    sim.run(30)
    assert len(sim.of("od")) == 1


def test_demand_older_than_the_window_loads_nothing() -> None:
    sim = _sim(model("od", min_=0, max_=1))
    sim.demand["od"] = sim.now
    sim.advance(61)
    sim.step()
    assert sim.of("od") == []


def test_min_0_max_0_stays_off_even_when_asked_for() -> None:
    sim = _sim(model("off", min_=0, max_=0))
    sim.demand["off"] = sim.now
    sim.step()
    sim.run(30)
    assert sim.of("off") == []


def test_no_scaling_stanza_stays_off_even_when_asked_for() -> None:
    bare = ModelSpec(name="bare", source="/models/bare", engine="sim")
    assert not bare.on_demand and bare.scaling.max == 0
    sim = _sim(bare)
    sim.demand["bare"] = sim.now
    sim.step()
    sim.run(30)
    assert sim.of("bare") == []


def test_idle_timer_runs_from_the_last_use() -> None:
    sim = _sim(model("od", min_=0, max_=1, idle=IDLE))
    rid = _load(sim, "od")
    used = sim.now + 500
    sim.last_used[rid] = used
    sim.advance(used + IDLE - 1 - sim.now)  # 1099s after ready, 599s after the last request
    sim.heartbeat()
    sim.step()
    assert sim.replicas[rid].stop is None, "a model in use is kept however long ago it loaded"
    sim.advance(1)
    sim.heartbeat()
    sim.step()
    r = sim.replicas[rid]
    assert r.stop is not None and r.stop.reason == Reason.Idle and r.stop.message == "unused for 600s"
    assert not r.ready and r.endpoint == ""
    assert sim.ready_reason(r) == Reason.Idle
    # the agent stops it, the record goes, and nothing replaces it
    sim.run(10)
    assert rid not in sim.replicas and sim.of("od") == []


def test_a_busy_model_is_never_stopped_for_idleness() -> None:
    sim = _sim(model("od", min_=0, max_=1, idle=IDLE))
    rid = _load(sim, "od")
    for _ in range(30):
        sim.last_used[rid] = sim.now
        sim.run(300)
    assert sim.replicas[rid].ready


def test_a_replica_with_a_request_in_flight_is_not_idle_however_long_the_request() -> None:
    """A generation longer than stop_unused_after (a long stream, a slow client): the replica serving it is in use, and
    is not stopped as "unused" under it (drain would let the stream finish, and the next request load again)."""
    sim = _sim(model("od", min_=0, max_=1, idle=IDLE))
    rid = _load(sim, "od")
    sim.last_used[rid] = sim.now  # the request began
    sim.outstanding[rid] = 1
    sim.advance(IDLE + 60)
    sim.heartbeat()
    sim.step()
    assert sim.replicas[rid].stop is None, "a replica serving a request is not idle"
    sim.outstanding[rid] = 0  # it ended now: the idle timer runs from here
    sim.last_used[rid] = sim.now
    sim.advance(IDLE)
    sim.heartbeat()
    sim.step()
    assert idle_stopped(sim.replicas[rid])


def test_with_no_use_reported_the_timer_runs_from_readiness_not_creation() -> None:
    sim = _sim(model("od", min_=0, max_=1, idle=IDLE))
    sim.demand["od"] = sim.now
    sim.step()
    (r,) = sim.of("od")
    sim.run(100, state="starting")  # a slow load: 100s from creation to ready
    sim.run(5)
    ready_at = sim.replicas[r.id].ready_at
    assert ready_at is not None and ready_at - r.created_at >= 100
    sim.advance(ready_at + IDLE - 1 - sim.now)
    sim.heartbeat()
    sim.step()
    assert sim.replicas[r.id].stop is None
    sim.advance(1)
    sim.heartbeat()
    sim.step()
    assert idle_stopped(sim.replicas[r.id])


def test_with_no_use_reported_the_timer_runs_from_our_own_start_when_that_is_later() -> None:
    sim = _sim(model("od", min_=0, max_=1, idle=IDLE))
    rid = _load(sim, "od")
    sim.advance(2 * IDLE)
    sim.started_at = sim.now  # the control plane restarted; nobody has reported usage since
    sim.heartbeat()
    sim.step()
    assert sim.replicas[rid].stop is None, "unknown is not idle"
    sim.advance(IDLE)
    sim.heartbeat()
    sim.step()
    assert idle_stopped(sim.replicas[rid])


def test_a_model_at_min_1_is_never_stopped_for_idleness() -> None:
    sim = _sim(model("kept", min_=1, max_=1, idle=60))
    sim.step()
    (r,) = sim.of("kept")
    sim.last_used[r.id] = sim.now
    sim.run(3600, every=60)
    assert sim.replicas[r.id].ready and sim.replicas[r.id].stop is None


def test_a_load_still_being_asked_for_is_not_stopped_as_idle() -> None:
    # stop_unused_after shorter than the load: requests keep arriving (and keep finding no ready replica)
    sim = _sim(model("od", min_=0, max_=1, idle=60))
    sim.demand["od"] = sim.now
    sim.step()
    (r,) = sim.of("od")
    for _ in range(12):  # two minutes of loading
        sim.demand["od"] = sim.now
        sim.run(10, state="starting")
    assert sim.replicas[r.id].stop is None, "stopped a load somebody is waiting for"
    assert [x.id for x in sim.of("od")] == [r.id]
    sim.run(5)
    assert sim.replicas[r.id].ready
