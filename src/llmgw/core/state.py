"""The control plane's records: nodes as reported, replicas as placed, the log of what changed."""

from __future__ import annotations

from pydantic import BaseModel, Field

from llmgw.core.conditions import Condition, Status, get_condition
from llmgw.core.explanation import Explanation
from llmgw.wire.messages import NodeReport


class NodeRecord(BaseModel):
    id: str
    report: NodeReport
    first_seen: float
    last_seen: float
    lost: bool = False
    revoked: str = ""  # set: an operator cut this node off, and why; it is refused at the door and counts as lost
    cert_serial: str = ""  # the certificate it last spoke with (hex), for `ctl nodes revoke --serial`
    cert_not_after: float | None = None


class ShardAssignment(BaseModel):
    rank: int
    node_id: str
    address: str
    gpus: list[int] = []
    serve_port: int | None = None
    rendezvous_port: int | None = None
    fabric: str | None = None
    fabric_adapters: list[str] = []


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
    stop_reason: str = ""  # set: the replica's shards are no longer desired; reaped once none runs
    failed: bool = False
    seen_ranks: list[int] = []  # ranks some node has reported: one that disappears afterwards is missing

    @property
    def placed(self) -> bool:
        return bool(self.assignments)

    @property
    def ready(self) -> bool:
        c = get_condition(self.conditions, "Ready")
        return c is not None and c.status == Status.TRUE and not self.stop_reason and not self.failed

    def node_ids(self) -> list[str]:
        return [a.node_id for a in self.assignments]


class Event(BaseModel):
    at: float
    kind: str  # node, replica, placement, engine
    subject: str
    message: str
