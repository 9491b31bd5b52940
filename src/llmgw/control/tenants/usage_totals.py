"""Usage totals kept in memory, so that a page view or a scrape reads no store at all.

Every request's usage reaches the store through the control plane (its own router's and every worker's), and the
store says which records were new (a batch sent twice counts once): those are added here too. At start the book is
read from the store's own aggregates (all-time totals, and the last day by the hour), never from the usage rows.
"""

from __future__ import annotations

from collections.abc import Sequence

from llmgw.store.base import AnyUsage, UsageTotal, hour_of, sum_by_hour

Pair = tuple[str, str]  # (key id, model)
DAY = 86400.0  # "the last day" of the usage views: what recent() is asked for


def _add(into: dict[Pair, list[float]], pair: Pair, requests: int, prompt: int, completion: int, at: float) -> None:
    t = into.get(pair)
    if t is None:
        into[pair] = [requests, prompt, completion, at]
        return
    t[0] += requests
    t[1] += prompt
    t[2] += completion
    t[3] = max(t[3], at)


def _totals(rows: dict[Pair, list[float]]) -> list[UsageTotal]:
    return [UsageTotal.model_construct(key_id=k, model=m, requests=int(t[0]), prompt_tokens=int(t[1]),
                                       completion_tokens=int(t[2]), last_at=float(t[3]))
            for (k, m), t in sorted(rows.items())]  # our own sums of validated records: no second validation


class UsageTotals:
    def __init__(self, keep_hours: int = 26) -> None:
        self.keep_hours = keep_hours
        self._all: dict[Pair, list[float]] = {}
        self._hours: dict[int, dict[Pair, list[float]]] = {}
        # the window recent() was last asked for, summed: kept up to date as records arrive, summed again from the
        # hours only when the window's first hour moves (once an hour), so a page view costs the pairs, not the hours
        self._first = -1
        self._window: dict[Pair, list[float]] = {}

    def load(self, totals: list[UsageTotal], hours: list[tuple[int, UsageTotal]]) -> None:
        self._all, self._hours, self._first, self._window = {}, {}, -1, {}
        for u in totals:
            _add(self._all, (u.key_id, u.model), u.requests, u.prompt_tokens, u.completion_tokens, u.last_at)
        for hour, u in hours:
            _add(self._hours.setdefault(hour, {}), (u.key_id, u.model), u.requests, u.prompt_tokens,
                 u.completion_tokens, u.last_at)

    def add(self, fresh: Sequence[AnyUsage]) -> None:
        """Records the store has just taken for the first time."""
        for (key_id, model, hour), (n, prompt, completion, last) in sum_by_hour(fresh).items():
            pair = (key_id, model)
            _add(self._all, pair, int(n), int(prompt), int(completion), last)
            _add(self._hours.setdefault(hour, {}), pair, int(n), int(prompt), int(completion), last)
            if self._first >= 0 and hour >= self._first:
                _add(self._window, pair, int(n), int(prompt), int(completion), last)
        if len(self._hours) > self.keep_hours:
            for h in sorted(self._hours)[: len(self._hours) - self.keep_hours]:
                del self._hours[h]

    def totals(self) -> list[UsageTotal]:
        return _totals(self._all)

    def recent(self, since: float) -> list[UsageTotal]:
        """From the hour holding `since` on, as the store's usage_recent counts it."""
        first = hour_of(since)
        if first != self._first:
            rows: dict[Pair, list[float]] = {}
            for h, per in self._hours.items():
                if h >= first:
                    for pair, t in per.items():
                        _add(rows, pair, int(t[0]), int(t[1]), int(t[2]), t[3])
            self._first, self._window = first, rows
        return _totals(self._window)
