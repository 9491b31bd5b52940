"""A placement decision as data: nodes filtered per reason, each node's own words, per-fabric shortfalls, the chosen
candidate and its named scores. Rendered to words only by the last renderer (ctl, the router's 503, a condition)."""

from __future__ import annotations

from pydantic import BaseModel

from llmgw.core.reasons import Reason


class NodeVerdict(BaseModel):
    node_id: str
    reason: Reason
    message: str  # the node's own words


class Candidate(BaseModel):
    nodes: list[str]
    scores: dict[str, float]  # named scores, averaged over the candidate's nodes
    total: float
    fabric: str | None = None  # a multi-node candidate's one fabric


class Shortfall(BaseModel):
    """A fabric that could not hold a multi-node replica: this many whole nodes fit on it, that many are needed."""

    fabric: str
    fit: int
    need: int


class Explanation(BaseModel):
    model: str
    at: float
    placed: bool
    nodes_evaluated: int = 0
    nodes_needed: int = 1
    filtered: dict[Reason, int] = {}  # how many nodes each reason excluded
    verdicts: list[NodeVerdict] = []  # bounded: the first few per reason
    shortfalls: list[Shortfall] = []  # multi-node: each fabric too small, by name
    chosen: Candidate | None = None

    def same_as(self, other: Explanation | None) -> bool:
        """Says the same thing (when it was said aside): repeating it is not a change worth a write."""
        return other is not None and self.model_dump(exclude={"at"}) == other.model_dump(exclude={"at"})


def explanation_lines(e: Explanation) -> list[str]:
    """The words for people. Only renderers call this; everything else reads the structure."""
    head = f"{e.model}: " + ("placed" if e.placed else "not placed")
    out = [f"{head} ({e.nodes_evaluated} nodes evaluated)"]
    if not e.placed:
        if e.shortfalls:
            out.append("; ".join(f"{s.fabric}: {s.fit} whole node(s) fit, needs {s.need}" for s in e.shortfalls))
        elif e.nodes_needed > 1:
            out.append(f"needs {e.nodes_needed} whole nodes on one fabric")
        else:
            out.append("no node can take the shard")
    for reason, n in sorted(e.filtered.items(), key=lambda kv: (-kv[1], kv[0])):
        out.append(f"  {reason}: {n} node{'s' if n != 1 else ''} excluded")
        for v in e.verdicts:
            if v.reason == reason:
                out.append(f"    {v.node_id}: {v.message}")
    if e.chosen:
        scores = ", ".join(f"{k}={v:.2f}" for k, v in sorted(e.chosen.scores.items()))
        on = f" on fabric {e.chosen.fabric}" if e.chosen.fabric else ""
        out.append(f"  chosen: {' + '.join(e.chosen.nodes)}{on} (score {e.chosen.total:.2f}: {scores})")
    return out
