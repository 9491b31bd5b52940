"""A model with LoRA adapters is placed only where the agent is sent them (wire version 12), and says why not."""

from __future__ import annotations

from llmgw.config.serving import AdapterConfig
from llmgw.core.reasons import Reason
from llmgw.placement.checks import Request
from llmgw.placement.place import Placement, Refusal, place
from llmgw.placement.snapshot import build_snapshot
from llmgw.records.state import NodeRecord
from llmgw.wire.serving import SERVING_WIRE_VERSION
from tests.clusters import model, node


def old_agent(n: NodeRecord) -> NodeRecord:
    return n.model_copy(update={"report": n.report.model_copy(update={"version": SERVING_WIRE_VERSION - 1})})


def test_an_agent_older_than_adapters_is_not_chosen_and_says_why() -> None:
    m = model().model_copy(update={"adapters": [AdapterConfig(name="m-ft", source="/w/ft.gguf")]})
    res = place(Request("r1", m), build_snapshot([old_agent(node("a-old")), node("b-new")], [], {m.name: m},
                                                 now=100.0))
    assert isinstance(res, Placement) and res.assignments[0].node_id == "b-new"
    res = place(Request("r1", m), build_snapshot([old_agent(node("a-old"))], [], {}, now=100.0))
    assert isinstance(res, Refusal) and res.explanation.filtered == {Reason.AgentTooOld: 1}
    words = res.explanation.verdicts[0].message
    assert f"wire version {SERVING_WIRE_VERSION - 1}" in words and "LoRA adapters" in words


def test_an_old_agent_still_takes_a_model_without_adapters() -> None:
    res = place(Request("r1", model()), build_snapshot([old_agent(node("a-old"))], [], {}, now=100.0))
    assert isinstance(res, Placement)
