"""Nodes as they report themselves, and the log lines a change in them deserves."""

from __future__ import annotations

from llmgw.config.server import ModelSpec
from llmgw.core.state import NodeRecord
from llmgw.placement.checks import Request, feasible
from llmgw.placement.snapshot import build_snapshot
from llmgw.reconcile.node_status import node_conditions
from llmgw.wire.messages import NodeReport


def qualifies(rec: NodeRecord, models: dict[str, ModelSpec], now: float) -> set[str]:
    """Models this node could take on its own, ignoring what already runs there."""
    view = build_snapshot([rec], [], models, now).nodes[0]
    return {name for name, m in models.items() if feasible(view, Request("", m)) is None}


def merge_report(
    old: NodeRecord | None, report: NodeReport, models: dict[str, ModelSpec], now: float
) -> tuple[NodeRecord, list[str]]:
    """The new record and what changed, in words an operator can act on."""
    conditions = node_conditions(old.conditions if old else [], report, lost=False, revoked="", now=now)
    rec = NodeRecord(
        id=report.node_id, report=report, first_seen=old.first_seen if old else now, last_seen=now, lost=False,
        conditions=conditions,
    )
    events: list[str] = []
    if old is None:
        gpus = len(report.hardware.gpus)
        events.append(f"node {report.node_id} registered from {report.address} with {gpus} GPU(s)")
    elif old.lost:
        events.append(f"node {report.node_id} is back after being lost")
    if old is not None and old.report.engines != report.engines:
        for e in report.engines:
            prev = next((o for o in old.report.engines if o.name == e.name), None)
            if prev != e:
                state = "runs" if e.runs else f"cannot run: {e.message}"
                events.append(f"node {report.node_id} now has {e.name} {e.version}: {state}")
    if old is not None and old.report.problems != report.problems:
        known = {(p.code, p.message) for p in old.report.problems}
        for p in report.problems:
            if (p.code, p.message) not in known:
                events.append(f"node {report.node_id}: {p.code}: {p.message}")
    if old is not None and _placement_facts(old.report) == _placement_facts(report):
        return rec, events  # most heartbeats: nothing placement reads has changed, so nothing new qualifies
    before = qualifies(old, models, now) if old is not None else set()
    gained = sorted(qualifies(rec, models, now) - before)
    if gained:
        events.append(f"node {report.node_id} now qualifies for {', '.join(gained)}")
    return rec, events


def _placement_facts(r: NodeReport) -> tuple[object, ...]:
    """What the feasibility checks read from a report (memory in use moves every heartbeat and is not among it)."""
    return (r.engines_probed, r.engines, r.install_progress, r.hardware.gpus, r.hardware.mem_total_bytes, r.fabrics,
            r.port_low, r.port_high)
