"""The control plane's records: nodes as reported, replicas as placed, the log of what changed."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, Field, computed_field, model_validator

from llmgw.core.conditions import Condition, ConditionType, Status, get_condition
from llmgw.core.explanation import Explanation
from llmgw.core.reasons import Reason, reason_or
from llmgw.wire.messages import NodeReport, ShardState


class NodeRecord(BaseModel):
    id: str
    report: NodeReport
    first_seen: float
    last_seen: float
    lost: bool = False
    revoked: str = ""  # set: an operator cut this node off, and why; it is refused at the door and counts as lost
    cert_serial: str = ""  # the certificate it last spoke with (hex), for `ctl nodes revoke --serial`
    cert_not_after: float | None = None
    conditions: list[Condition] = []  # derived from its reports and our bookkeeping (control.node_status)

    def condition(self, type_: ConditionType) -> Condition | None:
        return get_condition(self.conditions, type_)


class ShardAssignment(BaseModel):
    rank: int
    node_id: str
    address: str
    gpus: list[int] = []
    serve_port: int | None = None
    rendezvous_port: int | None = None
    worker_port: int | None = None  # a port a non-leading rank binds for its peers (llama.cpp's RPC server)
    fabric: str | None = None
    fabric_adapters: list[str] = []

    def ports(self) -> tuple[int, ...]:
        """Every port this shard binds on its node: what placement reserves there."""
        return tuple(p for p in (self.serve_port, self.rendezvous_port, self.worker_port) if p)


class StopRequest(BaseModel):
    """Why a replica's shards are no longer wanted. It is reaped once none of them runs."""

    reason: Reason
    message: str = ""
    for_model: str = ""  # Evicted: the model it makes room for
    at: float = 0.0  # when it was decided: requests in flight may finish until drain_timeout after it (0: unknown)


class ReplicaRecord(BaseModel):
    id: str
    model: str
    created_at: float
    shards_expected: int
    assignments: list[ShardAssignment] = []
    conditions: list[Condition] = []
    explanation: Explanation | None = None
    ready_at: float | None = None
    # derived from the leader's assignment (the address and port the control plane chose), never from a report
    endpoint: str = ""
    # the engine secret the control plane made for this replica: its engines answer only requests carrying it
    secret: str = Field(default="", repr=False)
    stop: StopRequest | None = None
    seen_ranks: list[int] = []  # ranks some node has reported: one that disappears afterwards is missing
    # its engine told to sleep at this level (0: awake), since slept_at: its GPUs free for others (reconcile/sleeping)
    sleep_level: Literal[0, 1, 2] = 0
    slept_at: float | None = None
    slept_for: str = ""  # put to sleep for this model's room (preempted): it sleeps on under it, waking once it goes
    woken_at: float | None = None  # a request woke it: its idle timer runs from then (its last use is older)

    @model_validator(mode="before")
    @classmethod
    def _of_old(cls, data: Any) -> Any:
        """Records written before stop requests were typed held "Reason: words"; before failure was a condition,
        flags."""
        if isinstance(data, dict) and "stop_reason" in data:
            data = dict(data)
            old = str(data.pop("stop_reason") or "")
            if old and data.get("stop") is None:
                code, _, words = old.partition(": ")
                data["stop"] = {"reason": reason_or(code, Reason.ScaledDown), "message": words}
        return _flags_as_conditions(data)

    # Failure is the Failed condition and release the Released one. The flags are still written beside the
    # conditions (a server of the previous release reads them) and read from rows that have only the flags.
    @computed_field  # type: ignore[prop-decorator]
    @property
    def failed(self) -> bool:
        c = get_condition(self.conditions, ConditionType.Failed)
        return c is not None and c.true

    @computed_field  # type: ignore[prop-decorator]
    @property
    def failed_at(self) -> float | None:
        c = get_condition(self.conditions, ConditionType.Failed)
        return c.last_transition if c is not None and c.true else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def released(self) -> bool:
        """Failed, and none of its shards runs any more: kept on view, holding nothing."""
        c = get_condition(self.conditions, ConditionType.Released)
        return c is not None and c.true

    @property
    def placed(self) -> bool:
        return bool(self.assignments)

    @property
    def stopping(self) -> bool:
        return self.stop is not None

    @property
    def ready(self) -> bool:
        c = get_condition(self.conditions, ConditionType.Ready)
        return c is not None and c.status == Status.TRUE and self.stop is None and not self.failed

    def condition(self, type_: ConditionType) -> Condition | None:
        return get_condition(self.conditions, type_)

    def node_ids(self) -> list[str]:
        return [a.node_id for a in self.assignments]


def _flags_as_conditions(data: Any) -> Any:
    """Rows written before failure was a condition hold `failed`, `failed_at` and `released` flags: they become
    the Failed and Released conditions (the Ready condition's reason and words say why it failed). Where the
    conditions are there already (rows written since, which carry both), the flags are dropped."""
    if not isinstance(data, dict) or not {"failed", "failed_at", "released"} & data.keys():
        return data
    data = dict(data)
    failed, at, released = data.pop("failed", False), data.pop("failed_at", None), data.pop("released", False)
    conds = [c if isinstance(c, Condition) else Condition.model_validate(c) for c in data.get("conditions") or []]
    if failed and get_condition(conds, ConditionType.Failed) is None:
        ready = get_condition(conds, ConditionType.Ready)
        why = ready.reason if ready is not None and not ready.true else Reason.ShardFailed
        conds.append(Condition(type=ConditionType.Failed, status=Status.TRUE, reason=why,
                               message=ready.message if ready is not None else "", last_transition=at or 0.0))
        if released and get_condition(conds, ConditionType.Released) is None:
            conds.append(Condition(type=ConditionType.Released, status=Status.TRUE, reason=Reason.ShardsGone,
                                   last_transition=at or 0.0))
    data["conditions"] = conds
    return data


class Event(BaseModel):
    at: float
    kind: str  # node, replica, placement, engine
    subject: str
    message: str


class Phase(StrEnum):
    Pending = "pending"  # not placed yet
    Starting = "starting"  # placed, not every shard serves
    Ready = "ready"
    Unresponsive = "unresponsive"  # it served, and an engine of it no longer answers: nothing is loading
    Sleeping = "sleeping"  # idle, its engine asleep and its GPUs free: the first request wakes it
    Stopping = "stopping"  # no longer wanted; reaped once its shards are gone
    Failed = "failed"  # lost a node or a shard: replaced, and reaped once its shards are gone


def replica_phase(r: ReplicaRecord) -> Phase:
    """The one naming of a replica's phase: summary, explain, metrics and the API all ask this."""
    if r.failed:
        return Phase.Failed
    if r.stop is not None:
        return Phase.Stopping
    if not r.placed:
        return Phase.Pending
    if r.sleep_level:
        return Phase.Sleeping
    if r.ready:
        return Phase.Ready
    c = r.condition(ConditionType.Ready)
    return Phase.Unresponsive if c is not None and c.reason == Reason.EngineUnresponsive else Phase.Starting


def not_answering(replicas: Iterable[ReplicaRecord]) -> dict[str, str]:
    """Models that have replicas, every one of them unresponsive (none ready, none on its way): model -> why, in the
    replicas' words. A request for one is refused at once: no load is under way to wait for."""
    live: dict[str, list[ReplicaRecord]] = {}
    for r in replicas:
        if not r.failed and r.stop is None:
            live.setdefault(r.model, []).append(r)
    out: dict[str, str] = {}
    for model, reps in sorted(live.items()):
        if all(replica_phase(r) == Phase.Unresponsive for r in reps):
            words = [f"replica {r.id}: {c.message}" for r in sorted(reps, key=lambda r: r.id)[:2]
                     if (c := r.condition(ConditionType.Ready)) is not None]
            out[model] = "; ".join(words)
    return out


def phase_condition(r: ReplicaRecord) -> Condition | None:
    """The condition that says why a replica is in its phase: Ready once placed, failed or stopping, else
    Scheduled (why it is not placed)."""
    placed_or_done = r.placed or r.failed or r.stop is not None
    return r.condition(ConditionType.Ready if placed_or_done else ConditionType.Scheduled)


def leader_shard(r: ReplicaRecord, by_id: dict[str, NodeRecord]) -> tuple[NodeRecord, ShardState] | None:
    """The replica's leading shard as its node last reported it, with that node; None when not reported."""
    lead = next((a for a in r.assignments if a.rank == 0), None)
    n = by_id.get(lead.node_id) if lead is not None else None
    if n is None:
        return None
    shard = next((s for s in n.report.shards if s.replica_id == r.id and s.rank == 0), None)
    return (n, shard) if shard is not None else None
