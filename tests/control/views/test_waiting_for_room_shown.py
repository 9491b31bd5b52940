"""A replica waiting for preempted replicas to go says so first on every surface: the status summary's replica and
model lines (dashboard, `ctl status`, /api/status) and `ctl explain` (/api/models/{name}/explain)."""

from __future__ import annotations

from llmgw.api.router import ModelExplanation, ReplicaExplanation, Wanted, model_explanation_lines
from llmgw.control.views.dashboard import render_view
from llmgw.control.views.summary import summarize
from llmgw.reconcile.world import Timings
from llmgw.records.state import replica_phase
from tests.clusters import model, node
from tests.reconcile.harness import Sim

WAITS = "waits for od on n1 to drain: 1 request in flight, at most 30 s (preempted: priority 100 over 0)"


def _waiting() -> tuple[Sim, str]:
    """od (on demand, busy a moment ago) on the only node; big (min 1) arrives and preempts it; a request lands on
    od before the routers drop it."""
    sim = Sim([model("od", gpus_per_shard=8, min_=0, max_=1, idle=3600)], [node("n1")],
              timings=Timings(drain_timeout=30.0))
    sim.demand["od"] = sim.now
    sim.step()
    sim.advance(5)
    sim.heartbeat()
    sim.step()
    (od,) = sim.live("od")
    sim.last_used[od.id] = sim.now
    sim.models["big"] = model("big", gpus_per_shard=8, min_=1, max_=1)
    sim.step()
    sim.outstanding[od.id] = 1
    sim.heartbeat(keep=[(od.id, 0)])
    sim.step()
    (big,) = sim.live("big")
    return sim, big.id


def test_the_summary_the_dashboard_and_explain_say_what_a_replica_waits_for() -> None:
    sim, rid = _waiting()
    s = summarize(list(sim.nodes.values()), list(sim.replicas.values()), [], dict(sim.last_used), sim.now,
                  models=sim.models)
    (line,) = [r for r in s.replicas if r.id == rid]
    assert line.placement[0].startswith(WAITS), line.placement
    assert line.reason == "WaitingForRoom"
    (big,) = [m for m in s.models if m.model == "big"]
    assert big.why[0].startswith(f"{rid}: {WAITS}"), big.why
    assert WAITS in render_view(s)
    r = sim.replicas[rid]
    explained = ModelExplanation(model="big", wanted=Wanted.Replicas, min=1, max=1, replicas=[ReplicaExplanation(
        id=r.id, phase=replica_phase(r), nodes=r.node_ids(), conditions=r.conditions, placement=r.explanation)])
    assert any(ln.startswith(f"replica {rid}: pending (WaitingForRoom: {WAITS}") for ln in
               model_explanation_lines(explained)), model_explanation_lines(explained)
