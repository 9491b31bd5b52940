"""What this router process measures of the requests it serves: one Measure per request, summed per model.

Only catalogued models get a label of their own: a client naming models that do not exist must not grow the
metrics (they are counted under OTHER), and a request refused before its model was read counts under "".
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass

from llmgw.api.stats import BUCKETS, Histogram, InFlight, ModelStats, RouterStats

OTHER = "(not in the catalog)"


@dataclass(slots=True)
class Measure:
    start: float  # the injected clock's monotonic seconds at arrival
    model: str = ""  # the catalog's name once the request named one it has
    key_id: str = ""
    queue_s: float = 0.0  # waiting for the model to load (a wait for a pooled connection is not timed: see app.py)
    first_at: float | None = None  # the first token of a stream
    last_at: float | None = None  # the last token seen
    completion_tokens: int = 0
    prompt_tokens: int = 0
    status: int = 0  # what the request is recorded as (a broken stream: not the 200 its headers said)
    overrun: bool = False  # the engine reported more tokens than the request reserved (recorded at the reservation)
    body_held: int = 0  # bytes of the router's body budget this request holds until it ends (uploads.py)


class _Tally:
    """One model's numbers as plain Python while requests arrive (a pydantic model's attribute assignment costs
    a Python-level __setattr__ each): made into ModelStats only when a snapshot is asked for."""

    __slots__ = ("completion_tokens", "counts", "overruns", "prompt_tokens", "requests", "sums")

    def __init__(self) -> None:
        self.requests: dict[str, int] = {}
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.overruns = 0
        self.counts: dict[str, list[int]] = {}  # per kind of BUCKETS, once observed: one per bucket and +Inf
        self.sums: dict[str, float] = {}

    def observe(self, kind: str, value: float) -> None:
        bounds = BUCKETS[kind]
        counts = self.counts.get(kind)
        if counts is None:
            counts = self.counts[kind] = [0] * (len(bounds) + 1)
        counts[bisect_left(bounds, value)] += 1
        self.sums[kind] = self.sums.get(kind, 0.0) + max(value, 0.0)

    def stats(self) -> ModelStats:
        hists = {kind: Histogram(counts=list(self.counts.get(kind, ())), sum=self.sums.get(kind, 0.0))
                 for kind in BUCKETS}
        return ModelStats(requests=dict(self.requests), prompt_tokens=self.prompt_tokens,
                          completion_tokens=self.completion_tokens, overruns=self.overruns, **hists)


class Recorder:
    def __init__(self) -> None:
        self.models: dict[str, _Tally] = {}
        self.in_flight: Counter[tuple[str, str]] = Counter()
        self.version = 0  # bumped on every change: a worker with nothing new reports nothing

    def begin(self, key_id: str, model: str) -> None:
        self.in_flight[(key_id, model)] += 1
        self.version += 1

    def end(self, key_id: str, model: str) -> None:
        k = (key_id, model)
        self.in_flight[k] -= 1
        if self.in_flight[k] <= 0:
            del self.in_flight[k]
        self.version += 1

    def finish(self, m: Measure, status: int, now: float) -> None:
        s = self.models.get(m.model)
        if s is None:
            s = self.models[m.model] = _Tally()
        code = str(m.status or status)
        s.requests[code] = s.requests.get(code, 0) + 1
        s.prompt_tokens += m.prompt_tokens
        s.completion_tokens += m.completion_tokens
        if m.overrun:
            s.overruns += 1
        s.observe("e2e", now - m.start)
        if m.model:
            s.observe("queue", m.queue_s)
        if m.first_at is not None:
            s.observe("ttft", m.first_at - m.start)
            if m.last_at is not None and m.completion_tokens > 1:
                s.observe("tbt", (m.last_at - m.first_at) / (m.completion_tokens - 1))
        self.version += 1

    def snapshot(self) -> RouterStats:
        out = RouterStats(models={k: v.stats() for k, v in self.models.items()})
        out.in_flight = [InFlight(key_id=k, model=m, n=n) for (k, m), n in sorted(self.in_flight.items())]
        return out
