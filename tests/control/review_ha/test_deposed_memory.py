"""A leader deposed while paused keeps, in memory, the replica changes the store refused."""

from __future__ import annotations

from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.reconcile.intents import Add, Reap
from tests.control.conftest import LEASE


async def test_a_deposed_leader_forgets_the_writes_the_store_refused(
        two: tuple[ControlPlane, ControlPlane, FakeClock]) -> None:
    """Found by an attack review.
    a leader that wakes from a pause still believing it leads applies a pass's intents to its memory;
    the store refuses the writes (Deposed), but when it learns it lost the lease nothing makes it read the
    replicas again (`_revs["replicas"]` already equals the store's, so follow_store sees no change). As a follower
    it then serves agents desired states and its router a table with a replica that does not exist (r2) and
    without one that does (r1), until the new leader happens to write a replica."""
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
