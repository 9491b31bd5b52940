"""What a change in a node's report deserves to be told, in words an operator can act on."""

from __future__ import annotations

from llmgw.control.nodes.registry import merge_report
from llmgw.wire.messages import EngineStatus
from tests.clusters import model, node


def test_first_report_registers_and_says_what_it_qualifies_for() -> None:
    rec, events = merge_report(None, node("n1").report, {"m": model("m")}, 10.0)
    assert rec.first_seen == 10.0 and not rec.lost
    assert events == ["node n1 registered from " + rec.report.address + " with 8 GPU(s)", "node n1 now qualifies for m"]


def test_never_probed_then_engine_installed_makes_a_node_qualify() -> None:
    models = {"m": model("m", engine="llamacpp", gpus_per_shard=0, cls=None)}
    old, _ = merge_report(None, node("n1", probed=False).report, models, 1.0)
    report = old.report.model_copy(update={
        "engines_probed": True, "engines": [EngineStatus(name="llamacpp", version="b10991", runs=True)]})
    rec, events = merge_report(old, report, models, 2.0)
    assert "node n1 now has llamacpp b10991: runs" in events
    assert "node n1 now qualifies for m" in events
    assert rec.first_seen == 1.0


def test_an_engine_that_stops_running_is_logged_with_its_words_and_no_qualification() -> None:
    models = {"m": model("m")}
    old, _ = merge_report(None, node("n1").report, models, 1.0)
    broken = [e.model_copy(update={"runs": False, "message": "libgomp.so.1: cannot open shared object"})
              if e.name == "sim" else e for e in old.report.engines]
    _, events = merge_report(old, old.report.model_copy(update={"engines": broken}), models, 2.0)
    assert events == ["node n1 now has sim 1: cannot run: libgomp.so.1: cannot open shared object"]


def test_a_lost_node_coming_back_is_logged() -> None:
    old, _ = merge_report(None, node("n1").report, {}, 1.0)
    _, events = merge_report(old.model_copy(update={"lost": True}), old.report, {}, 99.0)
    assert events == ["node n1 is back after being lost"]


def test_an_x86_cpu_without_avx2_is_said_from_the_hardware_not_the_nodes_code() -> None:
    from llmgw.core.conditions import ConditionType
    from llmgw.reconcile.node_status import node_conditions
    from llmgw.wire.messages import CPU, Hardware

    rep = node("n1").report.model_copy(update={"hardware": Hardware(arch="x86_64", cpu=CPU(cores=4)), "problems": []})
    conds = node_conditions([], rep, lost=False, revoked="", now=0.0)
    cpu = next(c for c in conds if c.type == ConditionType.CPUFeatures)
    assert (cpu.status, cpu.reason) == ("False", "NoAVX2")
