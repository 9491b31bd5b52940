"""A pass that finds nothing new writes nothing: an unplaceable replica is explained once, not once per pass."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from llmgw.config.server import ServerConfig, TLSFiles
from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.store.sqlite import SqliteStore
from tests.clusters import model, node


def test_passes_over_an_unchanged_unplaceable_cluster_write_nothing(tmp_path: Path) -> None:
    big = model("big", gpus_per_shard=8, min_=1, max_=1)
    cfg = ServerConfig(tls=TLSFiles(ca="x", cert="x", key="x"), models=[big])
    clock = FakeClock()
    plane = ControlPlane(cfg, SqliteStore(tmp_path / "s.db").open(), clock)
    plane.load()
    for n in (node("n1", n_gpus=4), node("n2", n_gpus=2)):
        plane.heartbeats.heartbeat(n.report)
    plane.passes.reconcile_once()  # creates the replica and finds no room for it
    clock.advance(1)
    plane.passes.reconcile_once()
    (r,) = plane.registry.replicas.values()
    assert not r.placed and r.explanation is not None and not r.explanation.placed

    watcher = sqlite3.connect(tmp_path / "s.db")  # data_version counts commits by connections other than this one
    before = int(watcher.execute("PRAGMA data_version").fetchone()[0])
    generation = plane.registry.generation
    for _ in range(5):
        clock.advance(1)
        assert plane.passes.reconcile_once() == []
    after = int(watcher.execute("PRAGMA data_version").fetchone()[0])
    assert after == before, f"{after - before} commit(s) from passes that found nothing new"
    assert plane.registry.generation == generation, "routers were woken for nothing"
    assert plane.registry.replicas[r.id].explanation == r.explanation

    # something new is still news: a node that could take it gets it placed
    plane.heartbeats.heartbeat(node("n3", n_gpus=8).report)
    clock.advance(1)
    plane.passes.reconcile_once()
    assert plane.registry.replicas[r.id].placed
    assert int(watcher.execute("PRAGMA data_version").fetchone()[0]) > after
