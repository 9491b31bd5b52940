"""A server taking the lease leads before it has adopted what the last leader left."""

from __future__ import annotations

import asyncio
import threading

from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.reconcile.intents import MarkLost
from llmgw.records.state import ReplicaRecord
from tests.clusters import node


async def test_a_pass_during_the_takeover_reads_does_not_declare_nodes_lost(
        two: tuple[ControlPlane, ControlPlane, FakeClock]) -> None:
    """A reconcile pass that runs while a new leader still reads the store, before it adopts the replicas, declares
    no node lost for the change of leader (here after the store was out for a minute)."""
    a, b, clock = two
    lost_after = a.cfg.node_lost_after
    clock.advance(1)
    a.heartbeats.heartbeat(node("n1").report)
    a.passes.reconcile_once()  # a persists n1
    await b.following.follow_store()
    assert b.registry.nodes["n1"].last_seen == clock.now()
    for _ in range(int(lost_after / 3) + 1):  # a minute in which nobody could take the lease (a store outage)
        clock.advance(3)
        b.heartbeats.heartbeat(node("n2").report)
    entered, go = threading.Event(), threading.Event()
    real = b.store.list_replicas

    def slow() -> list[ReplicaRecord]:
        got = real()
        entered.set()
        go.wait(30)
        return got

    b.store.list_replicas = slow  # type: ignore[method-assign]
    taking = asyncio.create_task(b.following.hold_lease())
    try:
        assert await asyncio.to_thread(entered.wait, 30), "hold_lease never read the replicas"
        intents = b.passes.reconcile_once()  # the reconcile loop's pass, at this moment
    finally:
        go.set()
        await taking
    lost = [i.node_id for i in intents if isinstance(i, MarkLost)]
    assert lost == [], f"a pass run during the takeover declared {lost} lost because the leader changed"
