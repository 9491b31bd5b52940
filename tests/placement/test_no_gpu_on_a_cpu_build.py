"""A model that asks for GPUs is never placed on a node whose build of its engine is a CPU one (vLLM's CPU build
on a node whose driver runs no CUDA build it has): it would hold the GPUs and compute on the CPU. The refusal is
NoGPUBuild with the node's own words, and a replica already placed there when the node's build became a CPU one
(its GPU build failed there, an upgrade offered none for its driver) is failed and placed again. Pure."""

from __future__ import annotations

from llmgw.core.reasons import Reason
from llmgw.placement.checks import Request
from llmgw.placement.place import Placement, Refusal, place
from llmgw.placement.snapshot import build_snapshot
from llmgw.records.state import NodeRecord
from llmgw.wire.messages import BuildPassedOver, EngineStatus
from tests.clusters import model, node
from tests.reconcile.harness import Sim

TOO_OLD = BuildPassedOver(variant="cuda13-x86_64", reason="DriverTooOld",
                          message="cuda13-x86_64 is built with CUDA 13.0 and needs an NVIDIA driver of 580 or newer; "
                                  "this node's driver is 515.105.01 (CUDA 11.7)")


def with_build(n: NodeRecord, variant: str, passed: list[BuildPassedOver] | None = None) -> NodeRecord:
    engines = [e for e in n.report.engines if e.name != "vllm"]
    engines.append(EngineStatus(name="vllm", version="0.32.0", runs=True, variant=variant, passed_over=passed or []))
    return n.model_copy(update={"report": n.report.model_copy(update={"engines": engines})})


def test_a_gpu_model_is_not_placed_on_a_cpu_build_and_the_node_says_why() -> None:
    m = model(engine="vllm", gpus_per_shard=8)
    cpu_only = with_build(node("a-515"), "cpu-x86_64", [TOO_OLD])
    snap = build_snapshot([cpu_only], [], {m.name: m}, now=100.0)
    res = place(Request("r1", m), snap)
    assert isinstance(res, Refusal)
    (v,) = res.explanation.verdicts
    assert v.reason == Reason.NoGPUBuild
    assert v.message.startswith("its vllm 0.32.0 is the CPU build cpu-x86_64, which uses no GPU"), v.message
    assert "515.105.01 (CUDA 11.7)" in v.message and "580 or newer" in v.message  # driver, CUDA, what was offered
    assert "asks for 8 GPU(s)" in v.message

    # beside it a node with a GPU build takes it; a CPU model (no GPUs asked) may still go to the CPU build
    gpu = with_build(node("b-580"), "cuda13-x86_64")
    res = place(Request("r1", m), build_snapshot([cpu_only, gpu], [], {m.name: m}, now=100.0))
    assert isinstance(res, Placement) and [a.node_id for a in res.assignments] == ["b-580"]
    cpu_model = model(engine="vllm", gpus_per_shard=0, cls=None)
    res = place(Request("r2", cpu_model), build_snapshot([cpu_only], [], {cpu_model.name: cpu_model}, now=100.0))
    assert isinstance(res, Placement)


def test_a_build_without_a_variant_is_the_operators_word() -> None:
    """An engine named in agent.yaml (or the sim) reports no variant: nothing says it cannot use the GPUs."""
    m = model(engine="vllm", gpus_per_shard=8)
    res = place(Request("r1", m), build_snapshot([with_build(node("n1"), "")], [], {m.name: m}, now=100.0))
    assert isinstance(res, Placement)


def test_a_replica_whose_node_fell_back_to_a_cpu_build_is_placed_again() -> None:
    m = model("big", engine="vllm", gpus_per_shard=8)
    sim = Sim([m], [with_build(node("n1"), "cuda12-x86_64"), with_build(node("n2"), "cuda12-x86_64")])
    sim.step()
    (first,) = sim.live("big")
    where = first.assignments[0].node_id
    sim.run(10)
    assert sim.ready_reason(sim.replicas[first.id]) == "AllShardsReady"
    # its GPU build failed there: the node now reports the CPU build, the better one passed over
    failed = BuildPassedOver(variant="cuda12-x86_64", reason="EngineCannotRun",
                             message="holds no memory on GPUs 0-7 after ready")
    sim.nodes[where] = with_build(sim.nodes[where], "cpu-x86_64", [failed])
    sim.step()
    old = sim.replicas[first.id]
    assert old.failed, old
    assert f"node {where} (rank 0): its vllm 0.32.0 is the CPU build cpu-x86_64" in str(old.conditions)
    sim.run(10)
    (now,) = sim.live("big")
    assert now.id != first.id and [a.node_id for a in now.assignments] != [where]
