"""What one node can make the control plane write is bounded; replicas from before engine secrets get one."""

from __future__ import annotations

import stat
from pathlib import Path

from llmgw.control.nodes.heartbeats import NODE_EVENT_BURST, NODE_EVENT_EVERY
from llmgw.core.clock import FakeClock
from llmgw.records.state import ReplicaRecord
from llmgw.store.sqlite import SqliteStore
from llmgw.wire.messages import Problem
from tests.clusters import node
from tests.harness import plane_in


def test_a_node_changing_its_words_every_heartbeat_cannot_fill_the_event_log(tmp_path: Path) -> None:
    p = plane_in(tmp_path)
    base = node("node01").report
    for i in range(500):
        words = [Problem(code="FabricProblem", message=f"problem {i}-{j}") for j in range(10)]
        p.heartbeats.heartbeat(base.model_copy(update={"problems": words}))
    logged = [e for e in p.store.list_events(10_000) if e.subject == "node01"]
    assert NODE_EVENT_BURST <= len(logged) <= NODE_EVENT_BURST + 1
    assert isinstance(p.clock, FakeClock)
    p.clock.advance(NODE_EVENT_EVERY * 3)
    p.heartbeats.heartbeat(base.model_copy(update={"problems": [Problem(code="FabricProblem", message="again")]}))
    last = p.store.list_events(1)[0].message
    assert "again" in last and "earlier change(s) of this node not logged" in last


def test_the_store_is_the_owners_alone_and_old_replicas_get_a_secret(tmp_path: Path) -> None:
    s = SqliteStore(tmp_path / "s.db").open()
    s.put_replica(ReplicaRecord(id="m-old", model="m", created_at=0.0, shards_expected=1))
    s.close()
    p = plane_in(tmp_path)
    assert stat.S_IMODE((tmp_path / "s.db").stat().st_mode) == 0o600
    assert len(p.registry.replicas["m-old"].secret) >= 32
    assert p.store.list_replicas()[0].secret == p.registry.replicas["m-old"].secret
