"""Choosing which cards a tensor group gets on one node."""

from __future__ import annotations

from functools import lru_cache

from llmgw.placement.snapshot import NodeView


@lru_cache(maxsize=4096)
def _nvlink_group(
    free: tuple[int, ...], peers: tuple[tuple[int, frozenset[int]], ...], k: int
) -> tuple[int, ...] | None:
    """The lowest-index set of k free cards that NVLink joins pairwise, or None if there is none."""
    links = dict(peers)
    best: tuple[int, ...] | None = None

    def extend(group: tuple[int, ...], rest: tuple[int, ...]) -> None:
        nonlocal best
        if best is not None:
            return
        if len(group) == k:
            best = group
            return
        for i, g in enumerate(rest):
            if all(g in links.get(m, frozenset()) for m in group):
                extend((*group, g), rest[i + 1 :])
                if best is not None:
                    return

    extend((), free)
    return best


def choose_gpus(n: NodeView, gpu_class: str | None, k: int) -> tuple[list[int], float]:
    """Cards for a shard and the NVLink score: 1 joined, 0.5 topology unknown, 0 known and not joined."""
    free = n.free_gpus(gpu_class)
    if k == 0:
        return [], 0.0
    if k == 1:
        return [free[0]], 1.0
    peers = n.nvlink_key
    if peers is None:
        return list(free[:k]), 0.5
    group = _nvlink_group(free, peers, k)
    if group is not None:
        return list(group), 1.0
    return list(free[:k]), 0.0
