"""A node's record is written to the store when its report says something new, and only then (a real control plane
over SQLite, a fake clock)."""

from __future__ import annotations

from pathlib import Path

from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from tests.clusters import node
from tests.harness import plane_in

URL = "https://models.example/m.gguf"


def revs(p: ControlPlane) -> int:
    return p.store.revs().get("nodes", 0)


def test_an_unchanged_report_writes_nothing_and_a_changed_one_is_written(tmp_path: Path) -> None:
    clock = FakeClock()
    p = plane_in(tmp_path, clock)
    rep = node("n1").report
    p.heartbeats.heartbeat(rep)
    p.registry.persist_nodes()
    written = revs(p)
    for _ in range(5):
        clock.advance(3)
        p.heartbeats.heartbeat(rep)
        p.registry.persist_nodes()
    assert revs(p) == written
    p.heartbeats.heartbeat(rep.model_copy(update={"weights": [URL]}))
    p.registry.persist_nodes()
    assert revs(p) == written + 1
    stored = p.store.get_node("n1")
    assert stored is not None and stored.report.weights == [URL]


def test_a_report_after_another_servers_record_is_written(tmp_path: Path) -> None:
    """Another server sharing the store took a different report since: this one's record must replace it there,
    though it says what this server last heard."""
    clock = FakeClock()
    p = plane_in(tmp_path, clock)
    rep = node("n1").report
    p.heartbeats.heartbeat(rep)
    p.registry.persist_nodes()
    clock.advance(3)
    mine = p.registry.nodes["n1"]
    theirs = mine.model_copy(update={"report": mine.report.model_copy(update={"weights": [URL]}),
                                     "last_seen": clock.now()})
    p.store.put_nodes([theirs])  # as the other server wrote it
    p.registry.heard_elsewhere(theirs)
    clock.advance(3)
    p.heartbeats.heartbeat(rep)
    p.registry.persist_nodes()
    stored = p.store.get_node("n1")
    assert stored is not None and stored.report.weights == []
