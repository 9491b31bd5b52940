"""Requests per replica lately: what preempting a replica costs, halving every half-life."""

from __future__ import annotations

from dataclasses import dataclass

from llmgw.control.activity.recent_requests import RecentRequests


@dataclass
class Rec:
    replica_id: str
    started_at: float


def test_counts_halve_every_half_life_and_late_records_weigh_as_of_when_made() -> None:
    rr = RecentRequests(half_life=100.0)
    rr.add([Rec("a", 1000.0), Rec("a", 1000.0), Rec("b", 900.0)])
    now = rr.at(1000.0)
    assert now["a"] == 2.0 and now["b"] == 0.5  # b: one request, a half-life ago
    assert rr.at(1100.0)["a"] == 1.0
    rr.add([Rec("a", 900.0)])  # made 100 s before a's latest: half a request as of then
    assert rr.at(1000.0)["a"] == 2.5
    rr.forget("a")
    assert "a" not in rr.at(1000.0) and dict(rr.at(1000.0)) == {"b": 0.5}
