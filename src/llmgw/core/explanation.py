"""A placement decision as data: nodes filtered per reason, each node's own words, candidate scores."""

from __future__ import annotations

from pydantic import BaseModel

from llmgw.core.reasons import Reason


class NodeVerdict(BaseModel):
    node_id: str
    reason: Reason
    message: str


class Candidate(BaseModel):
    nodes: list[str]
    scores: dict[str, float]
    total: float


class Explanation(BaseModel):
    model: str
    at: float
    placed: bool
    nodes_evaluated: int = 0
    filtered: dict[str, int] = {}  # Reason -> number of nodes it excluded
    verdicts: list[NodeVerdict] = []  # bounded: the first few per reason
    chosen: Candidate | None = None
    summary: str = ""

    def lines(self) -> list[str]:
        head = f"{self.model}: " + ("placed" if self.placed else "not placed")
        out = [f"{head} ({self.nodes_evaluated} nodes evaluated)"]
        if self.summary:
            out.append(self.summary)
        for reason, n in sorted(self.filtered.items(), key=lambda kv: (-kv[1], kv[0])):
            out.append(f"  {reason}: {n} node{'s' if n != 1 else ''} excluded")
            for v in self.verdicts:
                if v.reason == reason:
                    out.append(f"    {v.node_id}: {v.message}")
        if self.chosen:
            scores = ", ".join(f"{k}={v:.2f}" for k, v in sorted(self.chosen.scores.items()))
            out.append(f"  chosen: {' + '.join(self.chosen.nodes)} (score {self.chosen.total:.2f}: {scores})")
        return out
