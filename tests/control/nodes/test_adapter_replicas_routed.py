"""A replica is routed only once its engine has loaded its model's adapters as the catalog has them now, in that
order: llama-server knows an adapter by its index at launch, so an engine started before the catalog changed (the
control plane restarted with another list, or another server of a shared store still has the old one) would apply
another adapter than the one asked for, or refuse every request naming one it lacks."""

from __future__ import annotations

from pathlib import Path

from llmgw.config.server import ServerConfig, TLSFiles
from llmgw.config.serving import AdapterConfig
from llmgw.control.plane import ControlPlane
from llmgw.control.views.summary import summarize
from llmgw.core.clock import FakeClock
from llmgw.core.conditions import ConditionType, Status, set_condition
from llmgw.core.reasons import Reason
from llmgw.records.state import ReplicaRecord, ShardAssignment
from llmgw.store.sqlite import SqliteStore
from llmgw.wire.messages import ShardState
from tests.clusters import model, node

T0 = 1_800_000_000.0


def plane(tmp_path: Path, adapters: list[str]) -> ControlPlane:
    ready = set_condition([], ConditionType.Ready, Status.TRUE, Reason.AllShardsReady, "", T0)
    store = SqliteStore(tmp_path / "s.db").open()
    store.put_replica(ReplicaRecord(
        id="m-1", model="m", created_at=T0, shards_expected=1, conditions=ready, endpoint="http://10.0.0.1:20000",
        secret="s" * 64, assignments=[ShardAssignment(rank=0, node_id="n1", address="10.0.0.1", gpus=[0, 1, 2, 3],
                                                      serve_port=20000)]))
    spec = model("m", engine="llamacpp").model_copy(update={"adapters": [
        AdapterConfig(name=n, source=f"/w/{n}.gguf") for n in adapters]})
    p = ControlPlane(ServerConfig(tls=TLSFiles(ca="x", cert="x", key="x"), models=[spec]), store, FakeClock(T0))
    p.load()
    return p


def routed(p: ControlPlane, launched: list[str]) -> list[str]:
    shard = ShardState(replica_id="m-1", rank=0, state="ready", adapters=launched)
    p.heartbeats.heartbeat(node("n1", address="10.0.0.1", engines=("llamacpp",), shards=[shard]).report)
    return [r.id for r in p.registry.ready_table().get("m", [])]


def test_an_engine_started_with_other_adapters_is_not_routed_until_restarted_with_these(tmp_path: Path) -> None:
    p = plane(tmp_path, ["m-a", "m-b"])
    assert routed(p, ["m-b"]) == [], "m-b is index 1 now: the engine would apply what it has at 1, or refuse"
    assert routed(p, ["m-b", "m-a"]) == [], "the same adapters in another order are other indices"
    assert routed(p, []) == [], "an engine with none refuses the lora field every request carries"
    assert routed(p, ["m-a", "m-b"]) == ["m-1"]


def test_a_model_without_adapters_is_routed_as_before(tmp_path: Path) -> None:
    assert routed(plane(tmp_path, []), []) == ["m-1"]


def test_such_a_replica_is_not_ready_on_any_surface_and_says_why(tmp_path: Path) -> None:
    """Left out of routing alone, it would still look Ready on ctl, the dashboard and /metrics."""
    p = plane(tmp_path, ["m-a", "m-b"])
    routed(p, ["m-b"])
    p.passes.reconcile_once()
    r = p.registry.replicas["m-1"]
    c = r.condition(ConditionType.Ready)
    assert c is not None and c.status == Status.FALSE and c.reason == Reason.AdapterFailed, c
    assert "m-b" in c.message and "m-a" in c.message
    nodes = list(p.registry.nodes.values())
    s = summarize(nodes, list(p.registry.replicas.values()), [], {}, now=T0, models=p.registry.models)
    assert [x.replicas for x in s.adapters] == [[], []], "ctl, the dashboard and /metrics read these lines"
    as_ready = r.model_copy(update={"conditions": set_condition(
        r.conditions, ConditionType.Ready, Status.TRUE, Reason.AllShardsReady, "", T0)})
    s = summarize(nodes, [as_ready], [], {}, now=T0, models=p.registry.models)
    assert [x.replicas for x in s.adapters] == [["m-1"], ["m-1"]], "the check above can fail"
    routed(p, ["m-a", "m-b"])
    p.passes.reconcile_once()
    c = p.registry.replicas["m-1"].condition(ConditionType.Ready)
    assert c is not None and c.status == Status.TRUE
