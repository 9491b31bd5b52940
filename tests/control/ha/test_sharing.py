"""Key limits and in-flight counts shared between servers on one store."""

from __future__ import annotations

from llmgw.api.router import ActivityReport
from llmgw.control.activity.activity import REPORTER_SILENT_AFTER
from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.core.limits import KeyLimits, LimitRefusal
from llmgw.reconcile.intents import Add
from llmgw.store.base import UsageRecord


async def test_a_dead_servers_requests_in_flight_stop_holding_a_keys_concurrency(
        two: tuple[ControlPlane, ControlPlane, FakeClock]) -> None:
    """A dead server's requests in flight stop holding a key's concurrency on the other servers once its rows age
    out."""
    a, b, clock = two
    _, key = await a.credentials.create_key("t", [], KeyLimits(concurrency=2))
    for p in (a, b):
        await p.following.share_activity()
    # two in flight via b
    assert b.limit_counters.admit(key, 10)[0].admitted and b.limit_counters.admit(key, 10)[0].admitted
    await b.following.share_activity()
    await a.following.share_activity()
    d, _ = a.limit_counters.admit(key, 10)
    assert d.refusal == LimitRefusal.Rate, d  # right: b holds the key's two
    # b dies with them in flight; a goes on passing once a second
    for _ in range(600):  # ten minutes
        clock.advance(1)
        await a.following.share_activity()
    d, _ = a.limit_counters.admit(key, 10)
    assert d.admitted, f"ten minutes after the other server died: {d.message}"


async def test_a_dead_servers_replica_in_flight_counts_stop_after_30s(
        two: tuple[ControlPlane, ControlPlane, FakeClock]) -> None:
    """A dead server's requests in flight stop counting for a replica REPORTER_SILENT_AFTER (30 s) after its last row,
    not after the leader last re-read that row."""
    a, b, clock = two
    a.registry.apply([Add("r1", "m", 1, "s" * 64)])
    await b.following.follow_store()
    b.activity.record_activity(ActivityReport(reporter="local", outstanding={"r1": 2}))
    await b.following.share_activity()
    await a.following.share_activity()
    assert a.activity.outstanding().get("r1") == 2
    # b dies now (its last row was written at this time); a passes once a second
    for _ in range(int(REPORTER_SILENT_AFTER) + 2):
        clock.advance(1)
        await a.following.share_activity()
    assert a.activity.outstanding().get("r1", 0) == 0, (
        f"{REPORTER_SILENT_AFTER + 2:.0f}s after the other server's last row its requests still count: "
        f"{a.activity.outstanding()}")


async def test_a_keys_budget_holds_across_servers_when_requests_end(
        two: tuple[ControlPlane, ControlPlane, FakeClock]) -> None:
    """Tokens spent through another server keep counting against the key's budget here between the end of their
    reservation and this server's next read of the store's usage."""
    a, b, clock = two
    _, key = await a.credentials.create_key("t", [], KeyLimits(budget=1000, budget_period="total"))
    for p in (a, b):
        clock.advance(0.1)
        await p.following.follow_store()
        await p.following.share_activity()
    d, ticket = b.limit_counters.admit(key, 600)
    assert d.admitted
    await b.following.share_activity()
    await a.following.share_activity()
    clock.advance(1)
    assert b.limit_counters.settle(ticket, 600)  # it used all 600
    await b.activity.record_usage([UsageRecord(key_id=key.id, model="m", replica_id="r1", prompt_tokens=100,
                                      completion_tokens=500, started_at=clock.now(), duration_s=1, status=200)])
    await b.following.share_activity()
    await a.following.follow_store()  # a's next pass, a second later
    await a.following.share_activity()
    d, _ = a.limit_counters.admit(key, 900)
    assert not d.admitted, "600 of 1000 spent through b, yet a admitted a request that may cost 900"


async def test_tokens_given_back_elsewhere_are_given_back_here(
        two: tuple[ControlPlane, ControlPlane, FakeClock]) -> None:
    """Tokens that settling gave back on another server are given back to this server's tokens-per-minute bucket too."""
    a, b, clock = two
    _, key = await a.credentials.create_key("t", [], KeyLimits(tpm=1000))
    for p in (a, b):
        await p.following.share_activity()
    d, ticket = b.limit_counters.admit(key, 900)
    assert d.admitted
    await b.following.share_activity()
    await a.following.share_activity()  # read while in flight
    clock.advance(0.5)
    assert b.limit_counters.settle(ticket, 10)
    await b.following.share_activity()
    await a.following.share_activity()
    clock.advance(0.5)
    assert b.limit_counters.admit(key, 500)[0].admitted  # b itself has its 890 back
    d, _ = a.limit_counters.admit(key, 400)
    assert d.admitted, f"10 tokens used and 500 in flight through b of a tpm of 1000, yet: {d.message}"
