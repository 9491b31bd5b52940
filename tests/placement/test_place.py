from __future__ import annotations

from collections.abc import Iterable

from llmgw.config.server import ModelSpec
from llmgw.core.explanation import Shortfall, explanation_lines
from llmgw.core.reasons import Reason
from llmgw.placement.checks import Request
from llmgw.placement.place import Placement, Refusal, place
from llmgw.placement.snapshot import build_snapshot
from llmgw.records.state import NodeRecord, ReplicaRecord
from tests.clusters import model, node


def _place(nodes: Iterable[NodeRecord], m: ModelSpec, replicas: Iterable[ReplicaRecord] = ()) -> Placement | Refusal:
    snap = build_snapshot(list(nodes), list(replicas), {m.name: m}, now=100.0)
    return place(Request("r1", m), snap)


def test_single_node_goes_to_lowest_id_on_a_tie() -> None:
    res = _place([node("n2"), node("n1")], model())
    assert isinstance(res, Placement)
    assert [a.node_id for a in res.assignments] == ["n1"]
    assert res.assignments[0].gpus == [0, 1, 2, 3]
    assert res.assignments[0].serve_port == 20000


def test_weights_are_a_preference_not_a_filter() -> None:
    m = model()
    res = _place([node("n1"), node("n2", weights=(m.source,))], m)
    assert isinstance(res, Placement) and res.assignments[0].node_id == "n2"
    res = _place([node("n1")], m)
    assert isinstance(res, Placement) and res.assignments[0].node_id == "n1"


def test_a_node_whose_fabric_holds_the_weights_comes_before_one_that_would_fetch_them() -> None:
    """A peer copy beats a download from the origin; holding the file beats both. Never a filter."""
    m = model()
    holder = node("z-holder", fabric="ib-a", weights=(m.source,), n_gpus=4, faulty=(0, 1, 2, 3))  # cannot take it
    holder = holder.model_copy(update={"report": holder.report.model_copy(update={"peer_port": 7480})})  # serves
    res = _place([node("a-far", fabric="ib-b"), node("m-near", fabric="ib-a"), holder], m)
    assert isinstance(res, Placement) and res.assignments[0].node_id == "m-near"
    lost = holder.model_copy(update={"lost": True})
    res = _place([node("a-far", fabric="ib-b"), node("m-near", fabric="ib-a"), lost], m)
    assert isinstance(res, Placement) and res.assignments[0].node_id == "a-far", "a lost node holds nothing"


def test_each_check_reports_its_reason_with_the_nodes_words() -> None:
    m = model(gpus_per_shard=4)
    nodes = [
        node("a-lost", lost=True),
        node("b-unprobed", probed=False),
        node("c-noengine", engines=("llamacpp",)),
        node("d-a100", cls="A100-40G"),
        node("e-faulty", n_gpus=4, faulty=(3,)),
    ]
    res = _place(nodes, m)
    assert isinstance(res, Refusal)
    f = res.explanation.filtered
    assert f == {
        Reason.NodeNotReady: 1, Reason.EngineNotProbed: 1, Reason.EngineMissing: 1,
        Reason.GPUClassMismatch: 1, Reason.InsufficientGPUs: 1,
    }
    words = {v.node_id: v.message for v in res.explanation.verdicts}
    assert "Xid 79" in words["e-faulty"]
    assert "A100-40G" in words["d-a100"]
    text = "\n".join(explanation_lines(res.explanation))
    assert "InsufficientGPUs: 1 node excluded" in text  # the renderer words what the structure says


def test_engine_that_cannot_run_says_why() -> None:
    n = node("n1")
    n.report.engines[0] = n.report.engines[0].model_copy(
        update={"runs": False, "message": "libgomp.so.1: cannot open shared object file"})
    res = _place([n], model())
    assert isinstance(res, Refusal)
    assert "libgomp" in res.explanation.verdicts[0].message
    assert res.explanation.verdicts[0].reason == Reason.EngineCannotRun


def test_nvlink_pairs_are_preferred_on_a_pcie_box() -> None:
    # cards 0-1 and 2-3 are bridged; 0 and 3 are taken, so the only joined pair left is ... none of (1,2)
    m = model(gpus_per_shard=2, cls="L40S-45G")
    n = node("pcie", n_gpus=4, cls="L40S-45G", nvlink="pairs")
    from llmgw.records.state import ReplicaRecord, ShardAssignment
    held = ReplicaRecord(id="x", model=m.name, created_at=0, shards_expected=1,
                         assignments=[ShardAssignment(rank=0, node_id="pcie", address="a", gpus=[0])])
    res = _place([n], m, [held])
    assert isinstance(res, Placement)
    assert res.assignments[0].gpus == [2, 3]  # not [1, 2], which straddles two bridges
    assert res.explanation.chosen is not None and res.explanation.chosen.scores["nvlink"] == 1.0


def test_unknown_topology_takes_lowest_indices_and_says_so() -> None:
    m = model(gpus_per_shard=2)
    res = _place([node("n", nvlink="unknown")], m)
    assert isinstance(res, Placement)
    assert res.assignments[0].gpus == [0, 1]
    assert res.explanation.chosen is not None and res.explanation.chosen.scores["nvlink"] == 0.5


def test_multi_node_stays_on_one_fabric() -> None:
    m = model(nodes=2, gpus_per_shard=4)
    nodes = [node("node01", fabric="ib-a"), node("node03", fabric="ib-b"), node("node04", fabric="ib-b")]
    res = _place(nodes, m)
    assert isinstance(res, Placement)
    assert [a.node_id for a in res.assignments] == ["node03", "node04"]
    assert {a.fabric for a in res.assignments} == {"ib-b"}
    assert res.assignments[0].rendezvous_port is not None and res.assignments[1].serve_port is None
    assert res.assignments[0].fabric_adapters == ["mlx5_0", "mlx5_1"]


def test_multi_node_refusal_names_the_short_fabrics() -> None:
    m = model(nodes=2, gpus_per_shard=4)
    res = _place([node("node01", fabric="ib-a"), node("node03", fabric="ib-b")], m)
    assert isinstance(res, Refusal)
    assert Shortfall(fabric="ib-a", fit=1, need=2) in res.explanation.shortfalls
    assert res.explanation.filtered[Reason.FabricTooSmall] == 2


def test_impossible_profile_is_a_refusal_not_a_crash() -> None:
    res = _place([node("n1")], model(gpus_per_shard=16))
    assert isinstance(res, Refusal)
    assert res.explanation.filtered == {Reason.InsufficientGPUs: 1}


def test_every_port_a_rank_binds_is_reserved_on_its_own_node() -> None:
    """llama.cpp's RPC workers bind a port on their own node: placement gives it from that node's range and holds it,
    never the leader's rendezvous port plus the rank (another node's range, reserved by nothing)."""
    from llmgw.records.state import ReplicaRecord

    m = model(nodes=2, gpus_per_shard=4)
    n3, n4 = node("node03", fabric="ib-b"), node("node04", fabric="ib-b")
    n4.report = n4.report.model_copy(update={"port_low": 31000, "port_high": 31099})
    first = _place([n3, n4], m)
    assert isinstance(first, Placement)
    leader, worker = first.assignments
    assert worker.node_id == "node04" and worker.worker_port == 31000 and leader.worker_port is None
    held = ReplicaRecord(id="r0", model=m.name, created_at=0.0, shards_expected=2, assignments=first.assignments)
    snap = build_snapshot([n3, n4], [held], {m.name: m}, now=100.0)
    view = snap.node("node04")
    assert view is not None and 31000 in view.used_ports
