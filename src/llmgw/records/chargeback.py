"""What chargeback keeps in the store: each replica's span on its GPUs (what chargeback needs of it across
windows), and the GPU time charged per hour, key, model and GPU class (docs/tenants.md, "Chargeback")."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from llmgw.core.strict import Strict

OPERATOR = ""  # the key_id of the operator's share: GPU time no key caused (min >= 1 models' idle, unused loads)
Seconds = Annotated[float, Field(ge=0, le=1e13, allow_inf_nan=False)]
Time = Annotated[float, Field(ge=0, le=1e11, allow_inf_nan=False)]


class ChargeRow(Strict):
    """GPU-seconds charged in one hour to one key (OPERATOR: the operator's) on one model and GPU class, by what
    the GPUs were doing, and their price at the rates of the time they were charged."""

    hour: int = Field(ge=0, le=10**8)  # hours since 1970 (store/base.py hour_of)
    key_id: str = Field(max_length=128)
    model: str = Field(min_length=1, max_length=256)
    gpu_class: str = Field(min_length=1, max_length=256)
    busy_s: Seconds = 0.0  # its share of the time the replica's engine had its requests in flight
    load_s: Seconds = 0.0  # loading or waking for it
    idle_s: Seconds = 0.0  # kept warm for it: ready, nothing in flight
    cost: Seconds = 0.0  # in the chargeback currency

    @property
    def gpu_s(self) -> float:
        return self.busy_s + self.load_s + self.idle_s


class ReplicaSpan(Strict):
    """One replica's time on its GPUs, from placement to its end, and what chargeback carries across windows.
    Written only by the leader's chargeback (chargeback/), fenced like every leader write."""

    id: str = Field(min_length=1, max_length=256)
    model: str = Field(min_length=1, max_length=256)
    gpus: int = Field(ge=0, le=100_000)  # GPUs it holds over all its nodes (0: a CPU engine, counted as one device)
    gpu_class: str = Field(min_length=1, max_length=256)
    demand: bool  # loaded on demand (scaling.min 0): its load and idle time are its users'; else the operator's
    created_at: Time
    ready_at: Time | None = None  # first ready
    ended_at: Time | None = None  # gone from the registry (None: alive)
    asleep: Annotated[list[tuple[Time, Time | None]], Field(max_length=100_000)] = []  # GPUs free: not charged
    accounted_to: Time = 0.0  # its time before this is charged
    # chargeback's own carry (chargeback/): who the residency served so far, who loaded or woke it, time
    # waiting for a key to charge it to
    keys: Annotated[dict[str, Seconds], Field(max_length=100_000)] = {}
    trigger: str = Field(default="", max_length=128)
    pending_s: Seconds = 0.0  # load time with no trigger known yet
    pending_idle_s: Seconds = 0.0  # idle time before the residency served anyone: its trigger's, like its load
    residency_from: Time = 0.0  # when the current residency began: created_at, or its last wake
    # idle time is the keys' who used the residency within keep_for (the model's stop_unused_after: without them it
    # would have been stopped); each key's last use of it
    keep_for: Seconds = 600.0
    used_at: Annotated[dict[str, Time], Field(max_length=100_000)] = {}
    # who asked for the current residency's load or wake: each key's requests that waited for the model while it
    # loaded (the router marks each wait); the load is theirs by count, whoever was served first
    askers: Annotated[dict[str, float], Field(max_length=100_000)] = {}
