"""A hub model's weights plans: one node per fabric fetches the resolved commit's files from the hub, the others copy
them from nodes that hold the pinned source; the plan carries the files, where they are and (gated only) the token."""

from __future__ import annotations

import asyncio
from pathlib import Path

from llmgw.config.server import HubConfig, ModelSpec
from llmgw.control.hub.hub_models import HubModels
from llmgw.control.nodes.desired import desired_for
from llmgw.control.nodes.weights import Leaders, plans_for
from llmgw.core.clock import FakeClock
from llmgw.records.state import NodeRecord, ReplicaRecord, ShardAssignment
from llmgw.wire.hub import HubFile, HubRef, Resolution
from llmgw.wire.messages import WeightsPlan
from tests.clusters import model, node

C1, C2 = "1" * 40, "2" * 40
PINNED, OTHER_COMMIT = f"hf://org/m@{C1}", f"hf://org/m@{C2}"
FILES = (HubFile(path="model.safetensors", size=3000, sha256="ab" * 32), HubFile(path="config.json", size=7))


def resolved(gated: bool, token_file: Path | None = None) -> tuple[dict[str, ModelSpec], dict[str, WeightsPlan]]:
    """The catalog as nodes see it and the plans' starting points, from an owner that resolved hf://org/m@main."""

    def resolve(ref: HubRef, endpoint: str, tok: str | None, timeout: float) -> Resolution:
        return Resolution(ref.repo, ref.revision, C1, FILES, gated=gated)

    cfg = HubConfig(endpoint="https://mirror.example/hf", token_file=str(token_file) if token_file else None)
    hub = HubModels(cfg, FakeClock(), resolve)
    catalog = {"m": model(source="hf://org/m@main", gpus_per_shard=0, cls=None)}
    asyncio.run(hub.tick(catalog))
    return hub.pinned(catalog), hub.plans()


def rec(node_id: str, fabric: str = "ib-a", holds: str = "") -> NodeRecord:
    n = node(node_id, fabric=fabric, weights=(holds,) if holds else ())
    return n.model_copy(update={"report": n.report.model_copy(update={"peer_port": 7480})})


def replicas(*node_ids: str) -> list[ReplicaRecord]:
    return [ReplicaRecord(id=f"m-{i}", model="m", shards_expected=1, created_at=0.0, assignments=[
        ShardAssignment(node_id=n, address="10.0.0.1", rank=0, gpus=[])]) for i, n in enumerate(node_ids)]


def plans(nodes: list[NodeRecord], gated: bool = False, token_file: Path | None = None) -> dict[str, WeightsPlan]:
    models, hub = resolved(gated, token_file)
    by_id: dict[str, NodeRecord] = {n.id: n for n in nodes}
    leaders: Leaders = {}
    out = {}
    wanting = [n.id for n in nodes]
    for n in wanting:
        got, chosen = plans_for(n, by_id, replicas(*wanting), models, leaders, hub=hub)
        leaders.update(chosen)
        out[n] = got[PINNED]
    return out


def test_one_node_per_fabric_fetches_the_files_from_the_hub_and_the_others_wait() -> None:
    p = plans([rec("a1"), rec("a2"), rec("a3"), rec("b1", fabric="ib-b"), rec("b2", fabric="ib-b")])
    assert {n for n, x in p.items() if x.origin} == {"a1", "b1"}
    assert {n: x.wait_for for n, x in p.items() if not x.origin} == {"a2": "a1", "a3": "a1", "b2": "b1"}
    for x in p.values():
        assert x.files == list(FILES) and x.size == 3007
        assert x.base_url == f"https://mirror.example/hf/org/m/resolve/{C1}"


def test_holders_of_the_pinned_source_are_the_peers_and_another_commit_is_not() -> None:
    p = plans([rec("n1", holds=PINNED), rec("n2", holds=OTHER_COMMIT), rec("n3", holds="hf://org/m@main"),
               rec("n4")])
    assert [x.node_id for x in p["n4"].peers] == ["n1"]
    assert [x.node_id for x in p["n2"].peers] == ["n1"], "its directory of another commit is not this one"


def test_the_token_is_in_the_plans_of_a_gated_repository_only(tmp_path: Path) -> None:
    tok = tmp_path / "token"
    tok.write_text("hf_tok\n")
    tok.chmod(0o600)
    assert {x.token for x in plans([rec("n1"), rec("n2")], True, tok).values()} == {"hf_tok"}
    assert {x.token for x in plans([rec("n1"), rec("n2")], False, tok).values()} == {""}
    assert "hf_tok" not in repr(plans([rec("n1")], True, tok))


def test_shards_name_the_pinned_source_and_carry_its_plan() -> None:
    models, hub = resolved(gated=False)
    nodes = {"n1": rec("n1")}
    reps = replicas("n1")
    weights, _ = plans_for("n1", nodes, reps, models, hub=hub)
    shard = desired_for("n1", reps, models, ["sim"], 1.0, weights=weights).shards[0]
    assert shard.source == PINNED and shard.weights is not None and shard.weights.files == list(FILES)


def test_an_unresolved_hub_model_gets_no_plan() -> None:
    models = {"m": model(source="hf://org/m@main", gpus_per_shard=0, cls=None)}
    got, chosen = plans_for("n1", {"n1": rec("n1")}, replicas("n1"), models, hub={})
    assert got == {} and chosen == {}
