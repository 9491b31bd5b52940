"""Placing a hub model: a node holds it only at the resolved commit (the pinned source placement is given), its
fabric likewise; a node whose agent cannot fetch a hub directory is not chosen, and says why."""

from __future__ import annotations

from collections.abc import Iterable

from llmgw.config.server import ModelSpec
from llmgw.core.reasons import Reason
from llmgw.placement.checks import Request
from llmgw.placement.place import Placement, Refusal, place
from llmgw.placement.snapshot import build_snapshot
from llmgw.records.state import NodeRecord
from tests.clusters import model, node

C1, C2 = "1" * 40, "2" * 40
PINNED = f"hf://org/m@{C1}"


def hub_model(source: str = PINNED) -> ModelSpec:
    return model(source=source)


def serving(n: NodeRecord) -> NodeRecord:
    return n.model_copy(update={"report": n.report.model_copy(update={"peer_port": 7480})})


def old_agent(n: NodeRecord, version: int = 9) -> NodeRecord:
    return n.model_copy(update={"report": n.report.model_copy(update={"version": version})})


def chosen(nodes: Iterable[NodeRecord], m: ModelSpec) -> str:
    res = place(Request("r1", m), build_snapshot(list(nodes), [], {m.name: m}, now=100.0))
    assert isinstance(res, Placement)
    return res.assignments[0].node_id


def test_a_node_holds_a_hub_model_only_at_the_resolved_commit() -> None:
    nodes = [node("a-other-commit", weights=(f"hf://org/m@{C2}",)), node("b-commit", weights=(PINNED,))]
    assert chosen(nodes, hub_model()) == "b-commit"
    nodes = [node("a-none"), node("b-other-commit", weights=(f"hf://org/m@{C2}",))]
    assert chosen(nodes, hub_model()) == "a-none", "another commit counts for nothing: the tie breaks on the id"


def test_an_unpinned_hub_source_is_held_by_nobody() -> None:
    nodes = [node("a-none"), node("b-branch", weights=("hf://org/m@main",))]
    assert chosen(nodes, hub_model("hf://org/m@main")) == "a-none"


def test_a_fabric_holds_a_hub_model_only_at_the_resolved_commit() -> None:
    full = (0, 1, 2, 3, 4, 5, 6, 7)  # the holders can not take the replica themselves
    other = serving(node("z-holder-c2", fabric="ib-a", weights=(f"hf://org/m@{C2}",), faulty=full))
    same = serving(node("z-holder-c1", fabric="ib-b", weights=(PINNED,), faulty=full))
    nodes = [node("a-near-c2", fabric="ib-a"), node("b-near-c1", fabric="ib-b"), other, same]
    assert chosen(nodes, hub_model()) == "b-near-c1"


def test_a_node_whose_agent_is_older_than_version_10_is_not_chosen_and_says_why() -> None:
    nodes = [old_agent(node("a-old", weights=(PINNED,))), node("b-new")]
    assert chosen(nodes, hub_model()) == "b-new", "held there, but its agent can not fetch a directory"
    res = place(Request("r1", hub_model()), build_snapshot([old_agent(node("a-old"))], [], {}, now=100.0))
    assert isinstance(res, Refusal) and res.explanation.filtered == {Reason.AgentTooOld: 1}
    words = res.explanation.verdicts[0].message
    assert "wire version 9" in words and "upgrade the agent" in words


def test_an_old_agent_still_takes_a_model_that_is_not_from_the_hub() -> None:
    assert chosen([old_agent(node("a-old", weights=("/models/m",)), 4)], model()) == "a-old"
