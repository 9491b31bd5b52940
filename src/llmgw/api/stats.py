"""What a router measured, as data: counts and histograms per model, and requests in flight per key and model.

Router processes send their cumulative numbers with their activity reports; the control plane sums them over
every process and exports them. Cumulative, not deltas: a report sent twice or lost changes nothing, and a
counter only goes down when a process restarts (which Prometheus' rate() takes as a reset).
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Annotated

from pydantic import BaseModel, Field, model_validator

# Upper bounds in seconds. Time to first token and queue wait span a warm engine (tens of ms) to a model loaded on
# demand (a minute); time between tokens is per output token; end to end spans an embedding to a long generation.
BUCKETS: dict[str, tuple[float, ...]] = {
    "ttft": (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0),
    "tbt": (0.002, 0.005, 0.01, 0.02, 0.04, 0.08, 0.15, 0.3, 0.6, 1.2),
    "queue": (0.001, 0.005, 0.025, 0.1, 0.5, 1.0, 2.5, 5.0, 15.0, 30.0, 60.0),
    "e2e": (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0),
}
MAX_MODELS = 4096  # a report naming more models than a catalog holds is refused
Count = Annotated[int, Field(ge=0, le=2**53)]


class Histogram(BaseModel):
    counts: Annotated[list[Count], Field(max_length=32)] = []  # per bucket, not cumulative; the last is +Inf
    sum: float = Field(default=0.0, ge=0)

    def observe(self, kind: str, value: float) -> None:
        bounds = BUCKETS[kind]
        if not self.counts:
            self.counts = [0] * (len(bounds) + 1)
        self.counts[bisect_left(bounds, value)] += 1
        self.sum += max(value, 0.0)

    def add(self, other: Histogram) -> None:
        if len(other.counts) > len(self.counts):
            self.counts += [0] * (len(other.counts) - len(self.counts))
        for i, c in enumerate(other.counts):
            self.counts[i] += c
        self.sum += other.sum

    @property
    def count(self) -> int:
        return sum(self.counts)


class ModelStats(BaseModel):
    # by HTTP status ("499": the client left)
    requests: Annotated[dict[Annotated[str, Field(max_length=3)], Count], Field(max_length=1000)] = {}
    prompt_tokens: Count = 0
    completion_tokens: Count = 0
    overruns: Count = 0  # requests whose engine reported more tokens than they reserved (an alarm)
    ttft: Histogram = Histogram()  # request arrival to the first token of a stream
    tbt: Histogram = Histogram()  # a stream's time per output token after the first
    queue: Histogram = Histogram()  # waiting for a replica to load and for a connection to it
    e2e: Histogram = Histogram()  # request arrival to its last byte

    @model_validator(mode="after")
    def _buckets_fit(self) -> ModelStats:
        """A histogram has no counts (nothing observed) or one per bucket and one for +Inf: any other length would
        export a histogram without its +Inf bucket, or drop observations from its count."""
        for kind, bounds in BUCKETS.items():
            n = len(getattr(self, kind).counts)
            if n not in (0, len(bounds) + 1):
                raise ValueError(f"{kind}: {n} bucket counts, not {len(bounds) + 1}")
        return self

    def add(self, other: ModelStats) -> None:
        for status, n in other.requests.items():
            self.requests[status] = self.requests.get(status, 0) + n
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.overruns += other.overruns
        for kind in BUCKETS:
            getattr(self, kind).add(getattr(other, kind))


class InFlight(BaseModel):
    key_id: Annotated[str, Field(max_length=128)]
    model: Annotated[str, Field(max_length=128)]
    n: Count


class RouterStats(BaseModel):
    models: Annotated[dict[Annotated[str, Field(max_length=128)], ModelStats], Field(max_length=MAX_MODELS)] = {}
    in_flight: Annotated[list[InFlight], Field(max_length=65536)] = []

    def add(self, other: RouterStats) -> None:
        for name, s in other.models.items():
            self.models.setdefault(name, ModelStats()).add(s)
        mine = {(f.key_id, f.model): f for f in self.in_flight}
        for f in other.in_flight:
            if (f.key_id, f.model) in mine:
                mine[(f.key_id, f.model)].n += f.n
            else:
                g = f.model_copy()
                self.in_flight.append(g)
                mine[(g.key_id, g.model)] = g

    def counters_only(self) -> RouterStats:
        """What stays true of a process that stopped reporting: its counts, not its requests in flight."""
        return RouterStats(models={k: v.model_copy(deep=True) for k, v in self.models.items()})
