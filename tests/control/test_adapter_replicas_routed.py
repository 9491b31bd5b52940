"""A replica is routed only once its engine has loaded its model's adapters as the catalog has them now, in that
order: llama-server knows an adapter by its index at launch, so an engine started before the catalog changed (the
control plane restarted with another list, or another server of a shared store still has the old one) would apply
another adapter than the one asked for, or refuse every request naming one it lacks."""

from __future__ import annotations

from pathlib import Path

from llmgw.config.server import ServerConfig, TLSFiles
from llmgw.config.serving import AdapterConfig
from llmgw.control.plane import ControlPlane
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
