"""Named scores; each in [0, 1]. Filtering never happens here: a low score is a preference, not a refusal."""

from __future__ import annotations

from llmgw.placement.checks import Request
from llmgw.placement.snapshot import NodeView
from llmgw.wire.hub import is_hub, parse_hub

WEIGHTS = {"fresh": 4.0, "weights": 2.0, "nvlink": 1.0, "binpack": 0.5}
FABRIC_COPY = 0.2  # the weights score of a node whose fabric holds the weights


def fresh(n: NodeView, r: Request) -> float:
    """Not a node this model's replica just failed on: outweighs every other preference, filters nothing."""
    return 0.0 if n.id in r.failed_on else 1.0


def weights_present(n: NodeView, r: Request) -> float:
    """Holding the weights saves a copy of tens of gigabytes; a node of its fabric holding them turns a download
    from the origin into a copy from that peer; fetching is still a valid answer. A holder outscores any other
    node whatever their NVLink and packing (2 x 1 > 2 x FABRIC_COPY + 1 + 0.5); a peer copy only tips a choice."""
    source = r.model.source
    if is_hub(source) and not parse_hub(source).pinned:
        return 0.0  # a hub model counts as held only at its resolved commit, which placement is told as its source
    if source in n.weights:
        return 1.0
    return FABRIC_COPY if source in n.fabric_weights else 0.0


def binpack(n: NodeView, r: Request, gpus_after: int) -> float:
    """Fill partly used nodes first, so whole nodes stay free for replicas that need them."""
    if not n.gpus:
        return 0.0
    return gpus_after / len(n.gpus)


def total(scores: dict[str, float]) -> float:
    return sum(WEIGHTS[k] * v for k, v in scores.items())
