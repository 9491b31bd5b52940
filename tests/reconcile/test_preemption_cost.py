"""What preemption costs a pass: a model that no set of victims makes room for is tried once a pass, not once for
each replica it is missing (each try is a what-if over every candidate's node)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pytest

from llmgw.placement.checks import Request
from llmgw.placement.snapshot import Snapshot
from llmgw.reconcile import preemption
from llmgw.reconcile.world import World
from llmgw.records.state import NodeRecord, ReplicaRecord
from tests.clusters import model, node
from tests.reconcile.harness import Sim
from tests.reconcile.test_preemption import TIMINGS, _preempted, promised


def test_a_model_no_victims_make_room_for_is_tried_once_a_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    low = model("low", gpus_per_shard=8, min_=4, max_=4).model_copy(update={"priority": -1})
    sim = Sim([low], [node(f"n{i}") for i in range(4)], timings=TIMINGS)
    sim.step()
    sim.advance(5)
    sim.heartbeat()
    sim.step()
    assert all(r.ready for r in sim.live("low"))
    scaling = model().scaling.model_copy(update={"min": 5, "max": 5})
    sim.models["big"] = promised("big", gpus=16, scaling=scaling)  # 16 cards a shard: no node has them
    sim.step()
    assert len(sim.live("big")) == 5 and not any(r.placed for r in sim.live("big"))
    tried: list[str] = []
    real = preemption.choose

    def counted(req: Request, snap: Snapshot, current: Mapping[str, ReplicaRecord],
                nodes: Mapping[str, NodeRecord], w: World, rank: int,
                memo: preemption.Tried | None = None) -> preemption.Victims | None:
        tried.append(req.replica_id)
        return real(req, snap, current, nodes, w, rank, memo)

    monkeypatch.setattr(preemption, "choose", counted)
    sim.heartbeat()
    sim.step()
    assert len(tried) == 1, tried
    assert _preempted(sim) == []


def test_the_what_if_of_every_candidate_gone_is_made_once_a_pass_for_many_models(
        monkeypatch: pytest.MonkeyPatch) -> None:
    low = model("low", gpus_per_shard=8, min_=4, max_=4).model_copy(update={"priority": -1})
    sim = Sim([low], [node(f"n{i}") for i in range(4)], timings=TIMINGS)
    sim.step()
    sim.advance(5)
    sim.heartbeat()
    sim.step()
    for k in range(5):  # five models, each a replica no node has the cards for
        sim.models[f"big{k}"] = promised(f"big{k}", gpus=16)
    sim.step()
    built: list[int] = []
    real = preemption._Fits.without

    def counted(self: preemption._Fits, gone: Iterable[ReplicaRecord]) -> Snapshot:
        gone = list(gone)
        built.append(len(gone))
        return real(self, gone)

    monkeypatch.setattr(preemption._Fits, "without", counted)
    sim.heartbeat()
    sim.step()
    assert built == [4], "rebuilt for each model although the candidates and the snapshot were the same"
    assert _preempted(sim) == []
