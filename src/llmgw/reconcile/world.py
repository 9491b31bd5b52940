"""Everything the reconciler reads, gathered once per pass."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from llmgw.config.server import ModelSpec
from llmgw.core.reasons import Reason
from llmgw.reconcile.scaling import Timer
from llmgw.records.state import NodeRecord, ReplicaRecord


@dataclass(frozen=True)
class Timings:
    node_lost_after: float = 60.0
    evict_idle_after: float = 30.0  # a replica unused this long may be evicted for another model
    evict_protect: float = 300.0  # never evict a replica Ready for less than this (no ping-pong)
    demand_window: float = 60.0  # a request for a model with no replica wants one for this long
    # more than this share of the nodes silent at once: the control plane's own network is the likelier fault
    silent_majority: float = 0.5
    loss_grace: float = 6.0  # nodes this close to node_lost_after count as silent for the majority test
    lost_per_pass: float = 0.1  # at most this share of the nodes (at least one) is declared lost per pass
    # a failed replica whose shards are gone stays on view this long (0: reaped at once), holding nothing, so an
    # operator sees what failed and why; the model's replacements back off while failures repeat
    keep_failed: float = 0.0
    retry_base: float = 5.0  # the second failure in a row waits this long before a replacement, doubling after
    sleep_host_share: float = 0.5  # of a node's host memory, what replicas asleep there may hold
    drain_timeout: float = 60.0  # a stopped replica's requests in flight may finish for this long (config/server.py)


@dataclass(frozen=True)
class World:
    now: float
    started_at: float  # the control plane's start: timers with no better origin run from here
    models: dict[str, ModelSpec]
    nodes: list[NodeRecord]
    replicas: list[ReplicaRecord]
    demand: dict[str, float] = field(default_factory=dict)  # model -> last request that found no replica
    last_used: dict[str, float] = field(default_factory=dict)  # replica id -> last request (absent: unknown)
    outstanding: dict[str, int] = field(default_factory=dict)  # replica id -> requests in flight
    recent_requests: Mapping[str, float] = field(default_factory=dict)  # replica id -> requests lately (decaying)
    timings: Timings = Timings()
    # when the control plane last came back from a stall (a stopped process, a late loop): a node's silence is
    # counted from here at the earliest, since heartbeats it sent meanwhile may not have been read yet
    resumed_at: float = 0.0
    # fresh random bytes per pass (fixed in tests): new replicas' ids and engine secrets come from them, so neither
    # can be guessed from the model's name and the time
    entropy: bytes = b"\0" * 32
    # per model, how long its load has been above or below its target (scaling on load), as the last pass left it
    scale_timers: dict[str, Timer] = field(default_factory=dict)
    # per model that cannot be placed whatever the nodes (a hub source not resolved yet): the reason and its words
    unresolved: dict[str, tuple[Reason, str]] = field(default_factory=dict)
    # node id -> when it was last heard from (a renewal or a report; the later of this and its record's
    # last_seen counts): renewals update no record (wire/renewal.py)
    seen: dict[str, float] = field(default_factory=dict)
    # (model, engine, GPU class, way) -> seconds from placed or woken to ready, as measured (reconcile/fastest.py)
    ready_times: Mapping[tuple[str, str, str, str], float] = field(default_factory=dict)
    # (node, engine) -> its words: the engine refused sleep mode there, and runs there without (reconcile/sleeping.py)
    no_sleep: Mapping[tuple[str, str], str] = field(default_factory=dict)

    def heard(self, n: NodeRecord) -> float:
        return max(n.last_seen, self.seen.get(n.id, 0.0))
