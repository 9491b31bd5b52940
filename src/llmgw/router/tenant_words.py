"""What a tenant is told about a model it cannot be served now: what it can act on (wait, try later, ask the
operator), in reason codes and phases, never the operator's detail. The control plane's own explanation names
replica ids, nodes, disk figures, hub repositories and commits, and a hostile hub's own words; those stay on the
operator's surfaces (ctl explain, /api/explain, the dashboard), which the tenant's message points to."""

from __future__ import annotations

from llmgw.api.router import ModelExplanation
from llmgw.core.conditions import ConditionType
from llmgw.records.state import Phase

MAX_SHOWN = 2  # replicas summed up


def model_state(e: ModelExplanation | None) -> str:
    """One line: why the model is not served now, by phase and reason code ("a replica Pending (NoNodeFits)")."""
    if e is None:
        return "the operator can see why (llmgw ctl explain)"
    if e.weights is not None and not e.weights.resolved:
        return f"its weights cannot be had yet ({e.weights.reason or 'resolving'})"
    shown = []
    for r in e.replicas[:MAX_SHOWN]:
        kind = ConditionType.Scheduled if r.phase == Phase.Pending else ConditionType.Ready
        why = next((c for c in r.conditions if c.type == kind), None)
        shown.append(f"a replica {r.phase}" + (f" ({why.reason})" if why is not None and why.reason else ""))
    return "; ".join(shown) if shown else "no replica yet"
