"""Two control planes on one PostgreSQL database (tests/control/ha/conftest.py `two`): one leads and reconciles, the
other follows; a leader paused past its lease is deposed, its writes are refused by the store, and the new leader
adopts what the old one wrote without counting the change as node silence."""

from __future__ import annotations

from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.core.reasons import Reason
from llmgw.reconcile.intents import Add, Stop
from tests.control.ha.conftest import LEASE


async def test_one_leads_and_the_other_follows_until_the_lease_runs_out(
        two: tuple[ControlPlane, ControlPlane, FakeClock]) -> None:
    a, b, clock = two
    assert a.leadership.leading and not b.leadership.leading
    a.registry.apply([Add("r1", "m", 1, "")])
    assert b.passes.reconcile_once() == [] and b.passes.done == 1  # a follower's pass writes nothing
    clock.advance(LEASE / 3)
    await a.following.hold_lease()
    await b.following.hold_lease()
    assert a.leadership.leading and not b.leadership.leading  # extended in time: nothing changes hands
    clock.advance(LEASE + 1)  # a is paused past its lease; b tries
    await b.following.hold_lease()
    assert b.leadership.leading and b.leadership.epoch == 2
    assert set(b.registry.replicas) == {"r1"}, "the new leader adopts the replicas the last one wrote"
    assert b.registry.resumed_at == clock.now(), "node silence must count from the change, not from before it"


async def test_a_paused_leader_that_wakes_up_cannot_write(two: tuple[ControlPlane, ControlPlane, FakeClock]) -> None:
    a, b, clock = two
    a.registry.apply([Add("r1", "m", 1, "")])
    clock.advance(LEASE + 1)
    await b.following.hold_lease()  # a slept through its lease (SIGSTOP); b took over
    assert b.leadership.leading and a.leadership.leading  # a has not noticed yet: it still believes it leads
    a.registry.apply([Add("r2", "m", 1, ""), Stop("r1", Reason.ScaledDown, "by a deposed leader")])
    stored = {r.id: r.stop for r in b.store.list_replicas()}
    assert stored == {"r1": None}, f"the store took a deposed leader's writes: {stored}"
    await a.following.hold_lease()
    assert not a.leadership.leading and a.passes.reconcile_once() == []
    assert any("no longer leads" in e.message for e in a.store.list_events())


async def test_each_server_learns_what_the_others_wrote(two: tuple[ControlPlane, ControlPlane, FakeClock]) -> None:
    """A node reporting to the follower is in the leader's view after the follower's pass and the leader's next
    read; the leader's replicas reach the follower (its agents and its router read them there); a key made through
    one server is read again by the other's router."""
    from tests.clusters import node

    a, b, clock = two
    clock.advance(1)
    b.heartbeats.heartbeat(node("n1").report)
    b.passes.reconcile_once()  # a follower's pass writes the reports it received
    await a.following.follow_store()
    assert "n1" in a.registry.nodes and a.registry.nodes["n1"].last_seen == clock.now()
    a.registry.apply([Add("r1", "m", 1, "")])
    versions = b.credentials.keys_version
    await a.credentials.create_key("team", [])
    await b.following.follow_store()
    assert set(b.registry.replicas) == {"r1"} and b.credentials.keys_version > versions
    clock.advance(1)
    a.heartbeats.heartbeat(node("n1").report)  # the node moved to the leader: its newer report wins over the older row
    await a.following.follow_store()
    assert a.registry.nodes["n1"].last_seen == clock.now()


async def test_the_leader_counts_what_the_followers_routers_saw(
        two: tuple[ControlPlane, ControlPlane, FakeClock]) -> None:
    """A request for a model through a follower is demand the leader loads for; a replica busy through a follower
    is busy (never idle-evicted); its requests in flight count until that server stops saying so."""
    from llmgw.api.router import ActivityReport
    from llmgw.control.activity.activity import REPORTER_SILENT_AFTER

    a, b, clock = two
    a.registry.apply([Add("r1", "m", 1, "")])
    await b.following.follow_store()
    clock.advance(1)
    b.activity.record_activity(ActivityReport(reporter="local", demand={"m": clock.now()}, used={"r1": clock.now()},
                               outstanding={"r1": 2}))
    await b.following.share_activity()
    await a.following.share_activity()
    assert a.activity.demand.get("m") == clock.now() and a.activity.last_used.get("r1") == clock.now()
    assert a.activity.outstanding().get("r1") == 2
    b.activity.record_activity(ActivityReport(reporter="local", outstanding={}))
    await b.following.share_activity()
    await a.following.share_activity()
    assert a.activity.outstanding().get("r1", 0) == 0
    b.activity.record_activity(ActivityReport(reporter="local", outstanding={"r1": 1}))
    await b.following.share_activity()
    clock.advance(REPORTER_SILENT_AFTER + 1)  # b stops writing (it died): its count stops counting
    await a.following.share_activity()
    assert a.activity.outstanding().get("r1", 0) == 0


async def test_a_keys_limits_hold_across_servers(two: tuple[ControlPlane, ControlPlane, FakeClock]) -> None:
    """A key's requests per minute and requests in flight are counted across the servers sharing the store, late by
    one read of each other's counts: requests spread over two servers get no more than the key's limits."""
    from llmgw.core.limits import KeyLimits, LimitRefusal

    a, b, _clock = two
    _, key = await a.credentials.create_key("t", [], KeyLimits(rpm=4, concurrency=3))
    for p in (a, b):
        await p.following.share_activity()  # each has read the other's (nothing yet)
    tickets = [a.limit_counters.admit(key, 10)[1] for _ in range(2)]  # two in flight through a
    assert all(tickets)
    await a.following.share_activity()
    await b.following.share_activity()
    d, t3 = b.limit_counters.admit(key, 10)  # a third through b: within both limits
    assert d.admitted
    d, _ = b.limit_counters.admit(key, 10)
    assert d.refusal == LimitRefusal.Rate and "3 requests in flight" in d.message, d.message
    for t in tickets:
        assert a.limit_counters.settle(t, 5)
    assert b.limit_counters.settle(t3, 5)
    await a.following.share_activity()
    await b.following.share_activity()
    # nothing in flight now; 3 of 4 requests this minute were taken (2 through a)
    d, _ = b.limit_counters.admit(key, 10)
    assert d.admitted
    d, _ = b.limit_counters.admit(key, 10)
    assert d.refusal == LimitRefusal.Rate and "requests per minute" in d.message, d.message
