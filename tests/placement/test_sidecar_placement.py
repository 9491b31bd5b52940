"""A model with sidecars: placed only on agents that start them, and its shards carry them to the node."""

from __future__ import annotations

from llmgw.config.server import ModelSpec
from llmgw.config.serving import ReadyCheck, SidecarConfig
from llmgw.control.nodes.desired import desired_for
from llmgw.core.reasons import Reason
from llmgw.placement.checks import Request
from llmgw.placement.place import Placement, Refusal, place
from llmgw.placement.snapshot import build_snapshot
from llmgw.records.state import NodeRecord, ReplicaRecord, ShardAssignment
from llmgw.wire.serving import SERVING_WIRE_VERSION
from tests.clusters import model, node

TOK = SidecarConfig(name="tok", command=["tok", "{port}"], port=True, ready=ReadyCheck(tcp=True, timeout=5.0))


def with_sidecar() -> ModelSpec:
    return model().model_copy(update={"sidecars": [TOK]})


def agent_at(n: NodeRecord, version: int) -> NodeRecord:
    return n.model_copy(update={"report": n.report.model_copy(update={"version": version})})


def test_a_model_with_sidecars_is_not_placed_on_an_older_agent_and_says_why() -> None:
    m = with_sidecar()
    old = agent_at(node("a-old"), SERVING_WIRE_VERSION - 1)
    res = place(Request("r1", m), build_snapshot([old, node("b-new")], [], {m.name: m}, now=100.0))
    assert isinstance(res, Placement) and res.assignments[0].node_id == "b-new"
    res = place(Request("r1", m), build_snapshot([old], [], {m.name: m}, now=100.0))
    assert isinstance(res, Refusal) and res.explanation.filtered == {Reason.AgentTooOld: 1}
    words = res.explanation.verdicts[0].message
    assert f"wire version {SERVING_WIRE_VERSION - 1}" in words and "sidecars" in words and "upgrade" in words


def test_an_older_agent_still_takes_a_model_without_sidecars() -> None:
    m = model()
    old = agent_at(node("a-old"), SERVING_WIRE_VERSION - 1)
    res = place(Request("r1", m), build_snapshot([old], [], {m.name: m}, now=100.0))
    assert isinstance(res, Placement)


def test_the_desired_state_carries_each_sidecar_to_its_shard() -> None:
    m = with_sidecar()
    rep = ReplicaRecord(id="m-0", model="m", shards_expected=1, created_at=0.0, assignments=[
        ShardAssignment(node_id="n1", address="10.0.0.1", rank=0, gpus=[])])
    shard = desired_for("n1", [rep], {"m": m}, ["sim"], 1.0).shards[0]
    assert shard.sidecars == [TOK.spec()]
    assert (shard.sidecars[0].ready, shard.sidecars[0].ready_timeout, shard.sidecars[0].port) == ("tcp", 5.0, True)
