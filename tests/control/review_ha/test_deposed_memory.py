"""A leader deposed while paused keeps, in memory, the replica changes the store refused."""

from __future__ import annotations

from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.core.state import ReplicaRecord
from llmgw.reconcile.intents import PutReplica, Reap
from tests.control.conftest import LEASE


def replica(rid: str, at: float) -> ReplicaRecord:
    return ReplicaRecord(id=rid, model="m", created_at=at, shards_expected=1, secret="s" * 64)


async def test_a_deposed_leader_forgets_the_writes_the_store_refused(
        two: tuple[ControlPlane, ControlPlane, FakeClock]) -> None:
    """Found by an attack review.
    a leader that wakes from a pause still believing it leads applies a pass's intents to its memory;
    the store refuses the writes (Deposed), but when it learns it lost the lease nothing makes it read the
    replicas again (`_revs["replicas"]` already equals the store's, so follow_store sees no change). As a follower
    it then serves agents desired states and its router a table with a replica that does not exist (r2) and
    without one that does (r1), until the new leader happens to write a replica."""
    a, b, clock = two
    a.registry.apply([PutReplica(replica("r1", clock.now()))])
    await a.following.follow_store()  # a pass: a's revisions are the store's
    clock.advance(LEASE + 1)  # a paused past its lease
    await b.following.hold_lease()
    assert b.leadership.leading
    # a wakes and runs one pass before its lease loop notices: its writes are refused
    a.registry.apply([Reap("r1", "idle"), PutReplica(replica("r2", clock.now()))])
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
