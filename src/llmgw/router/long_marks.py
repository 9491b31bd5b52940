"""Requests in flight for long, marked for chargeback: a window is charged once it settled (settle_after after its
end), and a request's record lands only when it ends, so one running longer than that was charged nothing and its
GPU time went to others as idle. A request sent to a replica and in flight for `long_after` or more goes with the
usage batches as a mark (status IN_FLIGHT, how long it has run so far), again each half of that while it runs; the
store keeps marks apart from usage (store/chargeback_sql.py) and chargeback charges them in each window they span.
A request's wait for an on-demand model with no ready replica is marked too, once it ended (no replica: a wait):
chargeback charges the model's load to the keys whose requests waited for it, one share per request, whoever was
served first (a key that asked and left before the replica was ready paid nothing before)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from llmgw.store.base import IN_FLIGHT, Usage, new_usage_id

LONGEST_UNMARKED_S = 120.0


def long_after(settle_after: float) -> float:
    """How long a request runs before it is marked: well within settle_after, so every window it spans sees it."""
    return max(1.0, min(LONGEST_UNMARKED_S, settle_after / 3))


class LongMarks:
    def __init__(self, now: Callable[[], float], after: float) -> None:
        self.now = now  # the wall clock requests are timed by (their started_at)
        self.after = after
        self._marked: dict[str, float] = {}  # request id -> when it was last marked

    def due(self, inflight: Iterable[Usage]) -> list[Usage]:
        now, every = self.now(), self.after / 2
        out = []
        for rec in inflight:
            ran = now - rec.started_at
            if rec.replica_id and ran >= self.after and now - self._marked.get(rec.id, -every) >= every:
                self._marked[rec.id] = now
                out.append(Usage(rec.id, rec.key_id, rec.model, rec.replica_id, 0, 0, rec.started_at, ran, IN_FLIGHT))
        return out

    def forget(self, request_id: str) -> None:
        self._marked.pop(request_id, None)

    def waited(self, key_id: str, model: str, began: float, seconds: float) -> Usage:
        """A mark of one request's wait for a model to load (or wake)."""
        return Usage(new_usage_id(), key_id, model, "", 0, 0, began, max(0.0, seconds), IN_FLIGHT)
