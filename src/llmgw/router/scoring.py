"""Which ready replica takes a request: named, weighted scorers over a snapshot, and a decision that says why.

Pure: candidates in, a RouteDecision out. Each candidate carries what the router knows of a replica at that moment (its
own requests in flight there, the engine's own running/waiting gauges from the last heartbeat, how many leading
blocks of this request's prompt it was last sent); scorers turn that into numbers in [0, 1] (higher is better),
and the weighted sum picks. Like placement, the answer is data: a reason code and every candidate's scores, so a
routing decision can be explained without prose (the router sends it back in a header and counts it).

- load: a replica's load is what it is working on: the larger of the router's own in-flight count and the
  engine's running gauge (other router processes send to it too), plus what waits in the engine's queue.
  Scored 1 for the least loaded, falling by one per request above it.
- prefix: the fraction of the request's leading blocks the replica was last given (its KV cache likely still holds
  them). Only replicas whose load is within `margin` of the least loaded, and whose engine has a free slot when it
  has a fixed number of them (llama-server), may win on a prefix: a cache hit is not worth a queue.
- ties (equal scores: most often a prompt no replica was sent, on replicas equally idle) go, under the prefix
  policy, to the replica the prompt's leading text hashes to (rendezvous hashing of `home` with each replica id):
  different prompts spread over the replicas instead of all landing on the first listed, and a prompt the index
  has forgotten goes back where it went before. Otherwise, and under least_loaded, to the first listed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import StrEnum


class RouteReason(StrEnum):
    LeastLoaded = "LeastLoaded"  # no replica holds any of the prompt's blocks (or the policy does not look)
    PrefixHit = "PrefixHit"  # the chosen replica holds the longest run of the prompt's leading blocks
    PrefixOverloaded = "PrefixOverloaded"  # a replica held more of the prompt, but its load is past the margin
    NoReplica = "NoReplica"


@dataclass(frozen=True)
class ReplicaCandidate:
    replica_id: str
    in_flight: int = 0  # this router's requests on it now
    running: float | None = None  # the engine's own gauges, as last reported (None: not exposed or not known)
    waiting: float | None = None
    matched_blocks: int = 0  # leading blocks of this request it was last sent
    slots: int | None = None  # requests its engine runs at once, when a fixed number (llama-server's slots)

    @property
    def load(self) -> float:
        return max(float(self.in_flight), self.running or 0.0) + (self.waiting or 0.0)


@dataclass(frozen=True)
class Weights:
    load: float = 1.0
    prefix: float = 0.0  # 0: least_loaded; the prefix policy gives it weight
    margin: float = 4.0  # how much more loaded than the least loaded a prefix holder may be and still win


LEAST_LOADED = Weights()
PREFIX = Weights(load=1.0, prefix=2.0)


@dataclass(frozen=True)
class Score:
    replica_id: str
    load: float
    load_score: float
    prefix_score: float
    total: float
    eligible: bool  # within the margin: allowed to win on its prefix


@dataclass(frozen=True)
class RouteDecision:
    replica_id: str | None
    reason: RouteReason
    matched_blocks: int
    scores: tuple[Score, ...]


def _rendezvous(home: bytes, replica_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(home + replica_id.encode(), digest_size=8).digest())


def choose(candidates: list[ReplicaCandidate], blocks: int, w: Weights, home: bytes = b"") -> RouteDecision:
    """The best candidate for a request of `blocks` leading blocks (0: its prefix is not looked at). Ties go to
    the replica `home` hashes to, under a policy that weighs prefixes; else to the candidate listed first (the
    caller lists them in a stable order)."""
    if not candidates:
        return RouteDecision(None, RouteReason.NoReplica, 0, ())
    least = min(c.load for c in candidates)
    scores = []
    for c in candidates:
        load_score = 1.0 / (1.0 + c.load - least)
        # within the margin, and with a free slot unless none has one: a full engine queues the request
        eligible = c.load <= least + w.margin and (c.slots is None or c.load < c.slots or c.load <= least)
        prefix_score = c.matched_blocks / blocks if blocks and w.prefix and eligible else 0.0
        total = w.load * load_score + w.prefix * prefix_score
        scores.append(Score(c.replica_id, c.load, load_score, prefix_score, total, eligible))
    spread = bool(home and w.prefix and blocks)
    best = max(range(len(scores)), key=lambda i: (
        scores[i].total, _rendezvous(home, candidates[i].replica_id) if spread else 0, -i))
    chosen = candidates[best]
    longest = max(c.matched_blocks for c in candidates) if blocks and w.prefix else 0
    if longest and chosen.matched_blocks == longest:
        reason = RouteReason.PrefixHit
    elif longest and any(c.matched_blocks > chosen.matched_blocks and not s.eligible
                         for c, s in zip(candidates, scores, strict=True)):
        reason = RouteReason.PrefixOverloaded
    elif longest and chosen.matched_blocks:
        reason = RouteReason.PrefixHit  # a shorter run, on a replica much less loaded than the longest's
    else:
        reason = RouteReason.LeastLoaded
    return RouteDecision(chosen.replica_id, reason, chosen.matched_blocks, tuple(scores))
