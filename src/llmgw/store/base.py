"""The store interface. Records go in and out whole; a networked database can implement the same."""

from __future__ import annotations

import itertools
import json
import math
import os
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel, Field

from llmgw.config.server import ModelSpec
from llmgw.core.limits import KeyLimits
from llmgw.records.chargeback import ChargeRow, ReplicaSpan
from llmgw.records.state import Event, NodeRecord, ReplicaRecord
from llmgw.wire.hub import Resolution


class ApiKeyRecord(BaseModel):
    id: str
    name: str
    prefix: str  # shown to people; never enough to use
    hash: str  # sha256 of the whole key
    created_at: float
    revoked_at: float | None = None
    models: list[str] = []  # allow-list; empty = every model
    limits: KeyLimits | None = None  # rates, concurrency, budget (core/limits.py); None: the router's default_limits


class _UsageIds:
    """Usage record ids: a random prefix per process and a counter. Unique without a system call per request
    (os.urandom is one), and one process's records follow each other in the store's index on id instead of
    landing on a random page of it each. A forked child draws a prefix of its own: two processes counting from
    the same prefix would make ids that count once for two requests."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.prefix = secrets.token_hex(8)
        self.counter = itertools.count()

    def __call__(self) -> str:
        return f"{self.prefix}{next(self.counter):012x}"


new_usage_id = _UsageIds()
os.register_at_fork(after_in_child=new_usage_id.reset)


class UsageRecord(BaseModel):
    # made when the request is recorded: a record sent twice (a retried report, a replayed journal) counts once
    id: str = Field(default_factory=new_usage_id, min_length=8, max_length=64)
    key_id: str
    model: str
    replica_id: str
    prompt_tokens: int = Field(ge=0, le=2**31)  # bounded: SQLite's integers end at 2^63, and a count is no larger
    completion_tokens: int = Field(ge=0, le=2**31)
    started_at: float = Field(ge=0, le=1e11, allow_inf_nan=False)  # seconds since 1970, before the year 5000
    duration_s: float = Field(ge=0, le=1e9, allow_inf_nan=False)
    status: int = Field(ge=0, le=999)


IN_FLIGHT = 102  # a usage record's status while its request runs: a mark for chargeback (store/chargeback_sql.py)
_str = json.encoder.encode_basestring_ascii  # C: a JSON string, quotes included


@dataclass(slots=True, eq=False)
class Usage:
    """A usage record this process makes itself, per request on the router's hot path: UsageRecord's fields as a
    plain object (a pydantic model costs microseconds to build, copy and serialise, twice per request). Its values
    are the router's own, within UsageRecord's bounds by construction; what comes from elsewhere (a worker's
    report, a journal read back) is a UsageRecord, validated. The store takes either."""

    id: str
    key_id: str
    model: str
    replica_id: str
    prompt_tokens: int
    completion_tokens: int
    started_at: float
    duration_s: float
    status: int

    def json_line(self) -> bytes:
        """One line of JSON that UsageRecord reads back (the usage journal's)."""
        return (f'{{"id":{_str(self.id)},"key_id":{_str(self.key_id)},"model":{_str(self.model)},'
                f'"replica_id":{_str(self.replica_id)},"prompt_tokens":{self.prompt_tokens},'
                f'"completion_tokens":{self.completion_tokens},"started_at":{self.started_at!r},'
                f'"duration_s":{self.duration_s!r},"status":{self.status}}}\n').encode()

    def record(self) -> UsageRecord:
        """As a validated UsageRecord (to send to another process)."""
        return UsageRecord(id=self.id, key_id=self.key_id, model=self.model, replica_id=self.replica_id,
                           prompt_tokens=self.prompt_tokens, completion_tokens=self.completion_tokens,
                           started_at=self.started_at, duration_s=self.duration_s, status=self.status)


AnyUsage = UsageRecord | Usage
HOUR = 3600  # usage is summed by the hour since 1970


def hour_of(t: float) -> int:
    return int(t // HOUR)


def sum_by_hour(records: Iterable[AnyUsage]) -> dict[tuple[str, str, int], list[float]]:
    """Per key, model and hour: [requests, prompt tokens, completion tokens, the latest start]."""
    out: dict[tuple[str, str, int], list[float]] = {}
    for u in records:
        k = (u.key_id, u.model, hour_of(u.started_at))
        t = out.get(k)
        if t is None:
            out[k] = [1, u.prompt_tokens, u.completion_tokens, u.started_at]
        else:
            t[0] += 1
            t[1] += u.prompt_tokens
            t[2] += u.completion_tokens
            if u.started_at > t[3]:
                t[3] = u.started_at
    return out


class UsageTotal(BaseModel):
    key_id: str
    model: str
    requests: int
    prompt_tokens: int
    completion_tokens: int
    last_at: float


class Revocation(BaseModel):
    """A node cut off by an operator: every certificate of it (serial "") or one certificate (a stolen one)."""

    node_id: str
    serial: str = ""  # hex; "" = the whole node
    at: float
    reason: str = ""


class Lease(BaseModel):
    """Who reconciles: the holder, the fencing epoch every write of theirs carries, and until when it is theirs
    unless extended (wall clock of the servers; an epoch, not a clock, is what keeps a deposed holder out)."""

    holder: str
    epoch: int
    expires_at: float


MAX_AGE_MS = 2**53  # the largest age a row may say: every whole number of milliseconds up to it is a float
Renewals = tuple[str, float, dict[str, float]]  # (server, when it wrote, node id -> when it heard the node)


def renewals_body(at: float, heard: dict[str, float]) -> str:
    """A server's renewals as stored: each node's age at `at` in whole milliseconds (a third of the bytes of a
    timestamp: the row is rewritten every pass, with every node the server hears)."""
    return json.dumps({n: _age_ms(at, t) for n, t in heard.items()}, separators=(",", ":"))


def _age_ms(at: float, t: float) -> int:
    """The age rounded down, so the time read back is never before `t`: a leader's record of a node it declared
    lost then says it was last heard no earlier than the follower that heard it last, which takes the record."""
    ms = max(0, math.floor((at - t) * 1000))
    while ms and at - ms / 1000 < t:  # the float product rounded up to the next millisecond
        ms -= 1
    return ms


def renewals_read(at: float, body: str) -> dict[str, float] | None:
    """renewals_body read back (None: not one this release can read)."""
    try:
        ages = json.loads(body)
    except ValueError:
        return None
    # an age is never negative (a hearing after the row was written would keep a node alive past it) and fits a
    # float exactly: a row that breaks either is another release's or broken, and none of it is believed
    if not isinstance(ages, dict) or not all(isinstance(a, int) and not isinstance(a, bool) and 0 <= a <= MAX_AGE_MS
                                             for a in ages.values()):
        return None
    return {str(n): at - a / 1000 for n, a in ages.items()}


class Store(Protocol):
    def close(self) -> None: ...

    # nodes
    def put_node(self, node: NodeRecord) -> None: ...
    def put_nodes(self, nodes: list[NodeRecord]) -> None: ...
    def get_node(self, node_id: str) -> NodeRecord | None: ...
    def list_nodes(self) -> list[NodeRecord]: ...
    def nodes_since(self, rev: int) -> list[NodeRecord]: ...
    def revs(self) -> dict[str, int]: ...  # the revision of nodes, replicas, keys and revocations

    # catalog
    def put_models(self, models: list[ModelSpec]) -> None: ...
    def list_models(self) -> list[ModelSpec]: ...

    # replicas: written by the leader only; with `epoch`, refused (Deposed) unless it is still the lease's
    def put_replica(self, replica: ReplicaRecord, epoch: int | None = None) -> None: ...
    def delete_replica(self, replica_id: str, epoch: int | None = None) -> None: ...

    # leadership
    def lead(self, holder: str, epoch: int | None, now: float, ttl: float, force: bool = False) -> Lease: ...
    def release(self, holder: str, epoch: int) -> None: ...
    def list_replicas(self) -> list[ReplicaRecord]: ...

    # the log of what changed
    def add_event(self, event: Event) -> None: ...
    def list_events(self, limit: int = 100) -> list[Event]: ...

    # keys and usage
    def put_key(self, key: ApiKeyRecord) -> int: ...  # the keys' revision this write made (revs()["keys"])
    def list_keys(self) -> list[ApiKeyRecord]: ...
    def add_usage(self, records: Sequence[AnyUsage]) -> int: ...
    def add_usage_new(self, records: Sequence[AnyUsage]) -> list[AnyUsage]: ...  # the records that were new
    def usage_totals(self, since: float = 0.0) -> list[UsageTotal]: ...
    def usage_recent(self, since: float) -> list[UsageTotal]: ...  # from the hour holding `since`
    def usage_by_hour(self, since: float) -> list[tuple[int, UsageTotal]]: ...
    def key_usage_by_hour(self, key_id: str, since: float, before: float) -> list[tuple[int, UsageTotal]]: ...
    def usage_count(self) -> int: ...
    def prune(self, usage_before: float, events_before: float) -> tuple[int, int]: ...

    # what each server's routers saw, shared with the leader: (kind, name, at, n) rows per server
    def put_activity(self, server: str, rows: list[tuple[str, str, float, int]]) -> None: ...
    def activity(self, since: float) -> list[tuple[str, str, str, float, int]]: ...

    # when each server last heard, itself, the nodes that talk to it: one row per server (control/ha/liveness.py)
    def put_renewals(self, server: str, at: float, heard: dict[str, float]) -> None: ...
    def renewals(self, since: float) -> list[Renewals]: ...  # rows written after `since`

    # node revocations
    def put_revocation(self, revocation: Revocation) -> None: ...
    def list_revocations(self) -> list[Revocation]: ...

    # hub models' resolutions: the first written for a source is kept (control/hub/hub_models.py)
    def get_resolution(self, source: str) -> Resolution | None: ...
    def claim_resolution(self, source: str, resolution: Resolution) -> Resolution: ...
    def drop_resolution(self, source: str, commit: str) -> None: ...

    # chargeback (store/chargeback_sql.py)
    def charge_mark(self) -> float: ...
    def pruned_charges(self) -> list[ChargeRow]: ...
    def put_charges(self, rows: Sequence[ChargeRow], spans: Sequence[ReplicaSpan], before: float, to: float,
                    epoch: int | None = None, shares: Mapping[str, float] | None = None,
                    closed: Sequence[str] = ()) -> None: ...
    def open_spans(self, ended_since: float) -> list[ReplicaSpan]: ...
    def charges_since(self, since: float) -> list[ChargeRow]: ...
    def key_charges_since(self, key_id: str, since: float, before: float) -> list[ChargeRow]: ...  # one key's
    def charges_by_key_model(self, since: float) -> list[ChargeRow]: ...
    def usage_started(self, since: float, before: float) -> list[UsageRecord]: ...
    def open_usage(self, before: float) -> list[UsageRecord]: ...  # requests marked in flight (status IN_FLIGHT)
    def usage_requests(self, since: float, before: float, limit: int) -> list[tuple[UsageRecord, float]]: ...
