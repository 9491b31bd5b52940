"""A leader deposed while paused keeps, in memory, the replica changes the store refused."""

from __future__ import annotations

from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.reconcile.intents import Add, Reap
from tests.control.ha.conftest import LEASE


async def test_a_deposed_leader_forgets_the_writes_the_store_refused(
        two: tuple[ControlPlane, ControlPlane, FakeClock]) -> None:
    """A leader deposed while paused does not keep in memory the replica changes the store refused: as a follower it
    serves agents and its router what the store holds."""
    a, b, clock = two
    a.registry.apply([Add("r1", "m", 1, "s" * 64)])
    await a.following.follow_store()  # a pass: a's revisions are the store's
    clock.advance(LEASE + 1)  # a paused past its lease
    await b.following.hold_lease()
    assert b.leadership.leading
    # a wakes and runs one pass before its lease loop notices: its writes are refused
    a.registry.apply([Reap("r1"), Add("r2", "m", 1, "s" * 64)])
    assert {r.id for r in a.store.list_replicas()} == {"r1"}
    await a.following.hold_lease()
    assert not a.leadership.leading
    for _ in range(3):  # several follower passes; the new leader writes nothing meanwhile (a steady state)
        await a.following.follow_store()
        a.passes.reconcile_once()
    stored = {r.id for r in a.store.list_replicas()}
    held = a.registry.replicas
    assert set(held) == stored, (f"deposed leader's memory {sorted(held)} differs from the store "
                                       f"{sorted(stored)}")
