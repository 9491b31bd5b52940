"""A card in MIG mode is not a whole card: placement never hands it to a shard, and says why it did not."""

from __future__ import annotations

import pytest

from llmgw.core.reasons import Reason
from llmgw.placement.checks import Request
from llmgw.placement.place import Placement, Refusal, place
from llmgw.placement.snapshot import build_snapshot
from llmgw.records.state import NodeRecord
from llmgw.wire.messages import MigInstance
from tests.clusters import model, node

# what nvidia-smi -q -x reported for a real A100-SXM4-80GB cut into four instances
FOUR_SLICES = [
    MigInstance(gpu_instance=g, compute_instance=0, memory_mib=19968, multiprocessors=14) for g in (3, 4, 5, 6)
]


def with_mig(n: NodeRecord, cards: tuple[int, ...], instances: list[MigInstance]) -> NodeRecord:
    gpus = [g.model_copy(update={"mig": instances}) if g.index in cards else g for g in n.report.hardware.gpus]
    hardware = n.report.hardware.model_copy(update={"gpus": gpus})
    return n.model_copy(update={"report": n.report.model_copy(update={"hardware": hardware})})


def _place(n: NodeRecord, gpus_per_shard: int) -> Placement | Refusal:
    m = model(gpus_per_shard=gpus_per_shard, cls="A100-80G")
    return place(Request("r1", m), build_snapshot([n], [], {m.name: m}, now=100.0))


def test_mig_cards_are_skipped_and_the_whole_ones_used() -> None:
    n = with_mig(node("n1", n_gpus=4, cls="A100-80G"), (0, 1), FOUR_SLICES)
    res = _place(n, 2)
    assert isinstance(res, Placement)
    assert res.assignments[0].gpus == [2, 3]


def test_a_node_short_of_whole_cards_says_how_many_are_in_mig_mode() -> None:
    n = with_mig(node("n1", n_gpus=4, cls="A100-80G"), (0, 1), FOUR_SLICES)
    res = _place(n, 4)
    assert isinstance(res, Refusal)
    assert res.explanation.filtered == {Reason.InsufficientGPUs: 1}
    [verdict] = res.explanation.verdicts
    assert verdict.message == "2 free healthy GPU(s), needs 4; 2 in MIG mode (4 instances each; not offered whole)"


def test_mig_on_with_no_instances_yet_is_still_not_whole() -> None:
    n = with_mig(node("n1", n_gpus=1, cls="A100-80G"), (0,), [])
    res = _place(n, 1)
    assert isinstance(res, Refusal)
    assert "1 in MIG mode (no instances made yet" in res.explanation.verdicts[0].message



@pytest.mark.parametrize(
    ("cls", "reason"),
    [(None, Reason.InsufficientGPUs), ("A100-80G", Reason.InsufficientGPUs), ("A100-20G", Reason.GPUClassMismatch)],
)
def test_no_slice_stands_in_for_a_card_even_for_a_one_card_model(cls: str | None, reason: Reason) -> None:
    # the decision (docs/node-onboarding.md, MIG): a slice is not a placeable unit, however small the model; and a
    # slice's size is not a class: the card keeps its own, so "A100-20G" names no card here
    n = with_mig(node("n1", n_gpus=2, cls="A100-80G"), (0, 1), FOUR_SLICES)
    m = model(gpus_per_shard=1, cls=cls)
    res = place(Request("r1", m), build_snapshot([n], [], {m.name: m}, now=100.0))
    assert isinstance(res, Refusal)
    assert res.explanation.filtered == {reason: 1}
    if reason is Reason.InsufficientGPUs:
        assert res.explanation.verdicts[0].message.endswith("2 in MIG mode (4 instances each; not offered whole)")
