"""A hub model in a real control plane: not placed while its source is unresolved (its replica says why, in the
hub's words); once resolved, placed, and its node told the pinned source with the files to fetch."""

from __future__ import annotations

import asyncio
from pathlib import Path

from llmgw.config.server import ServerConfig, TLSFiles
from llmgw.control.plane import ControlPlane
from llmgw.core.clock import FakeClock
from llmgw.core.conditions import ConditionType
from llmgw.core.errors import HubFailed
from llmgw.core.reasons import Reason
from llmgw.records.state import ReplicaRecord
from llmgw.store.sqlite import SqliteStore
from llmgw.wire.hub import HubFile, HubRef, Resolution
from llmgw.wire.messages import FetchStatus
from tests.clusters import model, node

COMMIT = "c" * 40
DENIED = "the hub answered 401 (gated repository): set hub.token_file"


class Hub:
    def __init__(self) -> None:
        self.failing: HubFailed | None = HubFailed(Reason.HubAccessDenied, DENIED)
        self.commit = COMMIT

    def __call__(self, ref: HubRef, endpoint: str, token: str | None, timeout: float) -> Resolution:
        if self.failing is not None:
            raise self.failing
        return Resolution(ref.repo, ref.revision, self.commit, (HubFile(path="model.safetensors", size=42),))


def plane(tmp_path: Path, hub: Hub, clock: FakeClock | None = None) -> ControlPlane:
    m = model("m", source="hf://org/m@main", gpus_per_shard=0, cls=None, min_=1)
    cfg = ServerConfig(tls=TLSFiles(ca="x", cert="x", key="x"), models=[m])
    p = ControlPlane(cfg, SqliteStore(tmp_path / "s.db").open(), clock or FakeClock(), resolver=hub)
    p.load()
    return p


def only_replica(p: ControlPlane) -> ReplicaRecord:
    (r,) = p.registry.replicas.values()
    return r


def test_an_unresolved_model_is_not_placed_and_says_why_then_runs_at_its_commit(tmp_path: Path) -> None:
    hub, clock = Hub(), FakeClock()
    p = plane(tmp_path, hub, clock)
    p.heartbeats.heartbeat(node("node01").report)
    p.passes.reconcile_once()
    c = only_replica(p).condition(ConditionType.Scheduled)
    assert c is not None and c.reason == Reason.HubResolving and "hf://org/m@main" in c.message
    asyncio.run(p.hub_models.tick(p.registry.models))
    p.passes.reconcile_once()
    r = only_replica(p)
    c = r.condition(ConditionType.Scheduled)
    assert not r.placed and c is not None and c.reason == Reason.HubAccessDenied
    assert c.message == f"hf://org/m@main: {DENIED} (no hub.token_file is configured)"
    assert any(DENIED in e.message for e in p.store.list_events()), "the refusal is in the event log once"
    hub.failing = None
    clock.advance(60)
    asyncio.run(p.hub_models.tick(p.registry.models))
    p.passes.reconcile_once()
    assert only_replica(p).placed
    (shard,) = p.heartbeats.heartbeat(node("node01").report).shards
    assert shard.source == f"hf://org/m@{COMMIT}"
    assert shard.weights is not None and [f.path for f in shard.weights.files] == ["model.safetensors"]
    assert shard.weights.base_url == f"https://huggingface.co/org/m/resolve/{COMMIT}"


def test_an_agent_older_than_version_10_is_not_given_a_hub_model(tmp_path: Path) -> None:
    hub = Hub()
    hub.failing = None
    p = plane(tmp_path, hub)
    asyncio.run(p.hub_models.tick(p.registry.models))
    old = node("node01").report.model_copy(update={"version": 9})
    p.heartbeats.heartbeat(old)
    p.passes.reconcile_once()
    r = only_replica(p)
    assert not r.placed and r.explanation is not None and r.explanation.filtered == {Reason.AgentTooOld: 1}


def test_a_node_reporting_the_commit_gone_moves_the_model_to_the_new_commit(tmp_path: Path) -> None:
    hub, clock = Hub(), FakeClock()
    hub.failing = None
    p = plane(tmp_path, hub, clock)
    asyncio.run(p.hub_models.tick(p.registry.models))
    p.heartbeats.heartbeat(node("node01").report)
    p.passes.reconcile_once()
    clock.advance(10)
    gone = FetchStatus(source=f"hf://org/m@{COMMIT}", state="failed", reason=Reason.RevisionGone,
                       message="the hub answered 404 for the commit")
    (shard,) = p.heartbeats.heartbeat(node("node01").report.model_copy(update={"fetches": [gone]})).shards
    assert p.hub_models.states["m"].reason == Reason.HubResolving
    assert shard.source == f"hf://org/m@{COMMIT}", "kept until there is a commit to move to"
    hub.commit = "d" * 40
    asyncio.run(p.hub_models.tick(p.registry.models))
    (shard,) = p.heartbeats.heartbeat(node("node01").report).shards
    assert shard.source == f"hf://org/m@{'d' * 40}"
