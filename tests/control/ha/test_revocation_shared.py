"""A node revoked through one server is still let in by the others sharing the store."""

from __future__ import annotations

from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from tests.clusters import node


async def test_a_node_revoked_through_one_server_is_refused_by_the_others(
        two: tuple[ControlPlane, ControlPlane, FakeClock]) -> None:
    """A node revoked through one server is refused by every other server sharing the store, without a restart."""
    a, b, clock = two
    clock.advance(1)
    b.heartbeats.heartbeat(node("n1").report)
    b.passes.reconcile_once()
    await a.following.follow_store()
    assert "n1" in a.registry.nodes
    await a.revoke("n1", "", "stolen certificate")
    assert a.credentials.refusal("n1", "") != ""
    assert [r.node_id for r in b.store.list_revocations()] == ["n1"]
    for _ in range(3):  # b's passes
        clock.advance(1)
        await b.following.follow_store()
        await b.following.share_activity()
        b.passes.reconcile_once()
    assert b.credentials.refusal("n1", "") != "", "the other server still accepts the revoked node's heartbeats"
