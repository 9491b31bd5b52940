"""Placing several replicas in one pass: what one placement takes, the next cannot have."""

from __future__ import annotations

from llmgw.config.server import ModelSpec, Profile, Scaling
from llmgw.core.reasons import Reason
from llmgw.placement.checks import Request
from llmgw.placement.place import Placement, Refusal, place, reservations
from llmgw.placement.snapshot import Snapshot, build_snapshot
from llmgw.records.state import ReplicaRecord, ShardAssignment
from llmgw.wire.messages import ShardState
from tests.clusters import GiB, model, node


def _mem_model(name: str, gib: int, gpus: int = 0) -> ModelSpec:
    return ModelSpec(name=name, source=f"/models/{name}", engine="sim",
                     profile=Profile(gpus_per_shard=gpus, memory=gib * GiB), scaling=Scaling(min=1, max=4))


def _place_all(snap: Snapshot, m: ModelSpec, times: int) -> list[Placement | Refusal]:
    out: list[Placement | Refusal] = []
    for i in range(times):
        req = Request(f"r{i}", m)
        res = place(req, snap)
        out.append(res)
        if isinstance(res, Placement):
            snap = snap.with_reservation(req.replica_id, reservations(req, res.assignments))
    return out


def test_memory_reserved_by_a_running_replica_is_not_free() -> None:
    other, m = _mem_model("other", 64), _mem_model("m", 48)
    held = ReplicaRecord(id="x", model="other", created_at=0, shards_expected=1,
                         assignments=[ShardAssignment(rank=0, node_id="n1", address="a")])
    snap = build_snapshot([node("n1", mem_gib=96)], [held], {"other": other, "m": m}, 0.0)
    res = place(Request("r", m), snap)
    assert isinstance(res, Refusal)
    assert res.explanation.filtered == {Reason.InsufficientMemory: 1}
    assert "32.0 GiB unreserved memory, needs 48.0 GiB" in res.explanation.verdicts[0].message


def test_memory_reserved_earlier_in_the_same_pass_is_not_free() -> None:
    m = _mem_model("m", 48)
    snap = build_snapshot([node("n1", mem_gib=96)], [], {"m": m}, 0.0)
    got = _place_all(snap, m, 3)
    assert [isinstance(r, Placement) for r in got] == [True, True, False]
    assert isinstance(got[2], Refusal) and got[2].explanation.filtered == {Reason.InsufficientMemory: 1}


def test_cards_and_ports_reserved_earlier_in_the_same_pass_are_not_free() -> None:
    m = model(gpus_per_shard=3)
    snap = build_snapshot([node("n1")], [], {m.name: m}, 0.0)
    got = _place_all(snap, m, 3)
    placed = [r for r in got if isinstance(r, Placement)]
    assert [r.assignments[0].gpus for r in placed] == [[0, 1, 2], [3, 4, 5]]
    assert [r.assignments[0].serve_port for r in placed] == [20000, 20001]
    assert isinstance(got[2], Refusal)
    assert "2 free healthy GPU(s), needs 3" in got[2].explanation.verdicts[0].message


def test_a_node_taken_whole_in_this_pass_takes_nothing_else() -> None:
    wide = model("wide", nodes=2, gpus_per_shard=2)
    small = model("small", gpus_per_shard=1)
    nodes = [node("n1", fabric="ib-a"), node("n2", fabric="ib-a")]
    snap = build_snapshot(nodes, [], {"wide": wide, "small": small}, 0.0)
    req = Request("w", wide)
    res = place(req, snap)
    assert isinstance(res, Placement)
    snap = snap.with_reservation("w", reservations(req, res.assignments))
    res2 = place(Request("s", small), snap)
    assert isinstance(res2, Refusal)
    assert res2.explanation.filtered == {Reason.NodeNotWhole: 2}
    assert "held whole by multi-node replica w" in res2.explanation.verdicts[0].message


def test_a_port_outside_the_range_takes_nothing_from_it() -> None:
    n = node("n1")
    n.report.port_low, n.report.port_high = 20000, 20001
    # a shard from before the range was narrowed, still reported while its agent stops it
    n.report.shards = [ShardState(replica_id="old", rank=0, state="exited", endpoint="http://h:19000")]
    m = model(gpus_per_shard=1)
    res = place(Request("r", m), build_snapshot([n], [], {m.name: m}, 0.0))
    assert isinstance(res, Placement) and res.assignments[0].serve_port == 20000
