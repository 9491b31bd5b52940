"""Requests per replica lately, from the usage records the control plane takes in: a count that halves every
HALF_LIFE seconds, so a replica busy an hour ago weighs little now. Preemption reads it as what losing a replica
costs (reconcile/preemption.py)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Protocol

HALF_LIFE = 600.0
MAX_REPLICAS = 65536  # bounded: beyond this, the replica counted longest ago is dropped


class _Used(Protocol):
    @property
    def replica_id(self) -> str: ...

    @property
    def started_at(self) -> float: ...


class RecentRequests:
    def __init__(self, half_life: float = HALF_LIFE) -> None:
        self.half_life = half_life
        self._counts: dict[str, tuple[float, float]] = {}  # replica -> (count, as of when)

    def add(self, records: Iterable[_Used]) -> None:
        """Records taken for the first time (a batch sent twice counts once: the store says which are new)."""
        for u in records:
            count, at = self._counts.get(u.replica_id, (0.0, u.started_at))
            if u.started_at >= at:
                self._counts[u.replica_id] = (count * self._decay(u.started_at - at) + 1.0, u.started_at)
            else:  # arrived late (a journal read back): weighs as of when it was made
                self._counts[u.replica_id] = (count + self._decay(at - u.started_at), at)
        while len(self._counts) > MAX_REPLICAS:
            del self._counts[min(self._counts, key=lambda r: self._counts[r][1])]

    def forget(self, replica_id: str) -> None:
        self._counts.pop(replica_id, None)

    def at(self, now: float) -> Mapping[str, float]:
        """Each replica's count as of `now`, worked out when read: a pass reads a few, never all."""
        return _Decayed(self, now)

    def _decay(self, seconds: float) -> float:
        return float(0.5 ** (max(0.0, seconds) / self.half_life))


class _Decayed(Mapping[str, float]):
    def __init__(self, of: RecentRequests, now: float) -> None:
        self._of, self._now = of, now

    def __getitem__(self, replica_id: str) -> float:
        count, at = self._of._counts[replica_id]
        return count * self._of._decay(self._now - at)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._of._counts))

    def __len__(self) -> int:
        return len(self._of._counts)
