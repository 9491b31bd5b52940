"""A leader deposed while paused keeps, in memory, the replica changes the store refused."""

from __future__ import annotations

from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.reconcile.intents import Add, Reap
from tests.control.conftest import LEASE


async def test_a_deposed_leader_forgets_the_writes_the_store_refused(
        two: tuple[ControlPlane, ControlPlane, FakeClock]) -> None:
    """A leader deposed while paused does not keep in memory the replica changes the store refused: as a follower it
    serves agents and its router what the store holds."""
    a, b, clock = two
    a.apply([Add("r1", "m", 1, "s" * 64)])
    await a.follow_store()  # a pass: a's revisions are the store's
    clock.advance(LEASE + 1)  # a paused past its lease
    await b.hold_lease()
    assert b.leading
    # a wakes and runs one pass before its lease loop notices: its writes are refused
    a.apply([Reap("r1"), Add("r2", "m", 1, "s" * 64)])
    assert {r.id for r in a.store.list_replicas()} == {"r1"}
    await a.hold_lease()
    assert not a.leading
    for _ in range(3):  # several follower passes; the new leader writes nothing meanwhile (a steady state)
        await a.follow_store()
        a.reconcile_once()
    stored = {r.id for r in a.store.list_replicas()}
    assert set(a.replicas) == stored, (f"deposed leader's memory {sorted(a.replicas)} differs from the store "
                                       f"{sorted(stored)}")
