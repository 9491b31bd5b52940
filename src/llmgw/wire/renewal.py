"""Liveness apart from state: a node whose report has not changed sends a renewal instead of sending it again.

A full report (POST /v1/agent/heartbeat) is answered with the desired state, which names a renewal token and its
own etag (wire version 11). Until the node's report changes, it renews (POST RENEWAL_PATH) with the token, the etag
of the desired state it holds and its engines' gauges (which move all the time and are no change of the report). The
answer is the desired state when it differs from the etag's, else nothing new. A control plane that holds no report
under that token (it restarted, the node last reported elsewhere, the node was lost) answers SEND_REPORT with its
words, and the node sends its report whole at once. The report goes whole anyway when its digest changes
(`report_digest`: hardware, engines, weights, fetches, shard states) and every REPORT_REFRESH_S.

A control plane of wire version 10 or older gives no token (the agent then sends every report whole) and reads no
version 11 report (the agent then sends it as the version the control plane names in its refusal): see agent/client.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated

from pydantic import Field

from llmgw.core.strict import Strict
from llmgw.wire.messages import LEASE, WIRE_NAMES, WIRE_VERSION, DesiredState, EngineLoad, Name, NodeReport

RENEWAL_PATH = "/v1/agent/lease"
RENEWAL_WIRE_VERSION = 11  # the first version with renewals
SEND_REPORT = 409  # the status of a renewal the control plane cannot take: the node sends its report whole, now
MAX_RENEWAL_BYTES = 256 * 1024  # 1,024 shards' gauges fit; a renewal is usually a few hundred bytes
REPORT_REFRESH_S = 300.0  # an unchanged report is sent whole this often anyway (free memory and disk, as they are)
MEMORY_STEPS = 32  # free memory and disk count as changed when they cross a 1/32 (disk: 1/64) step of the total
DISK_STEPS = 64


class ShardLoad(Strict):
    """A shard's engine gauges now (None: not scraped, or the engine has none)."""

    replica_id: Name
    rank: int = Field(ge=0, le=1023)
    load: EngineLoad | None = None


class Renewal(Strict):
    """A node's renewal: alive, its report unchanged since the one `token` names, holding the desired state `etag`."""

    model_config = WIRE_NAMES
    version: int = WIRE_VERSION
    node_id: Name = Field(min_length=1)
    token: Annotated[str, Field(min_length=1, max_length=128, validation_alias=LEASE, serialization_alias=LEASE)]
    etag: Annotated[str, Field(max_length=128)] = ""
    loads: Annotated[list[ShardLoad], Field(default_factory=list, max_length=1024)]


class RenewalAnswer(Strict):
    """A renewal taken: the node's desired state when it differs from the one the node named, else None."""

    version: int = WIRE_VERSION
    desired: DesiredState | None = None


def _step(value: int, total: int, steps: int) -> int:
    return value * steps // total if total > 0 else value


FreeSpace = tuple[tuple[int, int, int], ...]  # (free, total, steps) of memory, the disk, each weights directory


def free_space(report: NodeReport) -> FreeSpace:
    """What of the report moves all the time and counts only when it moves by a step of its total."""
    hw = report.hardware
    space = [(hw.mem_available_bytes, hw.mem_total_bytes, MEMORY_STEPS)]
    if hw.disk is not None:
        space.append((hw.disk.free_bytes, hw.disk.total_bytes, DISK_STEPS))
    space += [(w.free_bytes, w.total_bytes, DISK_STEPS) for w in report.weights_dirs]
    return tuple(space)


def free_space_moved(before: FreeSpace, now: FreeSpace) -> bool:
    """Whether any free space moved by a step of its total since `before` (or the set of them changed). Measured
    from the value last sent, not from fixed boundaries: a value sitting at a boundary and moving by a byte either
    way is no change."""
    if [(t, n) for _, t, n in before] != [(t, n) for _, t, n in now]:
        return True
    return any(abs(a - b) * n >= t if t > 0 else a != b for (a, t, n), (b, _, _) in zip(before, now, strict=True))


def _digest(data: dict[str, object]) -> str:
    return hashlib.blake2b(json.dumps(data, sort_keys=True, separators=(",", ":")).encode(),
                           digest_size=16).hexdigest()


def _without_free_space(report: NodeReport, free: list[int]) -> dict[str, object]:
    """The report as data, its engine gauges left out and its free space (in free_space's order) set to `free`."""
    data = report.model_dump(mode="json")
    hw = data["hardware"]
    values = iter(free)
    hw["mem_available_bytes"] = next(values)
    if report.hardware.disk is not None:
        hw["disk"]["free_bytes"] = next(values)
    for d in data["weights_dirs"]:
        d["free_bytes"] = next(values)
    for s in data["shards"]:
        s.pop("load", None)
    return data


def report_shape(report: NodeReport) -> str:
    """The digest of what the report says apart from its free space and engine gauges: the agent renews while this
    holds and free_space has not moved (agent/renewals.py)."""
    return _digest(_without_free_space(report, [0] * len(free_space(report))))


def report_digest(report: NodeReport) -> str:
    """What the report says, apart from what moves all the time: free memory and disk counted in steps of their
    totals, engine gauges left out (a renewal carries them). Equal digests: the control plane has nothing to learn
    from the report that a renewal would not tell it (it writes a node's record only when this changes). The control
    plane keys renewals by its own token, never by this."""
    return _digest(_without_free_space(report, [_step(f, t, n) for f, t, n in free_space(report)]))


def loads_of(report: NodeReport) -> list[ShardLoad]:
    """The gauges a renewal carries: each shard's, as the report has them."""
    return [ShardLoad(replica_id=s.replica_id, rank=s.rank, load=s.load) for s in report.shards]
