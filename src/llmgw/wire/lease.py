"""Liveness apart from state: a node whose report has not changed renews a lease instead of sending it again.

A full report (POST /v1/agent/heartbeat) is answered with the desired state, which names a lease token and its own
etag (wire version 11). Until the node's report changes, it renews (POST LEASE_PATH) with the token, the etag of the
desired state it holds and its engines' gauges (which move all the time and are no change of the report). The
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

from llmgw.wire.messages import WIRE_VERSION, DesiredState, EngineLoad, Name, NodeReport, Strict

LEASE_PATH = "/v1/agent/lease"
LEASE_WIRE_VERSION = 11  # the first version with leases
SEND_REPORT = 409  # the status of a renewal the control plane cannot take: the node sends its report whole, now
MAX_LEASE_BYTES = 256 * 1024  # 1,024 shards' gauges fit; a lease is usually a few hundred bytes
REPORT_REFRESH_S = 300.0  # an unchanged report is sent whole this often anyway (free memory and disk, as they are)
MEMORY_STEPS = 32  # free memory and disk count as changed when they cross a 1/32 (disk: 1/64) step of the total
DISK_STEPS = 64


class ShardLoad(Strict):
    """A shard's engine gauges now (None: not scraped, or the engine has none)."""

    replica_id: Name
    rank: int = Field(ge=0, le=1023)
    load: EngineLoad | None = None


class Lease(Strict):
    """A node's renewal: alive, its report unchanged since the one `lease` names, holding the desired state `etag`."""

    version: int = WIRE_VERSION
    node_id: Name = Field(min_length=1)
    lease: Annotated[str, Field(min_length=1, max_length=128)]
    etag: Annotated[str, Field(max_length=128)] = ""
    loads: Annotated[list[ShardLoad], Field(default_factory=list, max_length=1024)]


class LeaseAnswer(Strict):
    """A renewal taken: the node's desired state when it differs from the one the node named, else None."""

    version: int = WIRE_VERSION
    desired: DesiredState | None = None


def _step(value: int, total: int, steps: int) -> int:
    return value * steps // total if total > 0 else value


def report_digest(report: NodeReport) -> str:
    """What the report says, apart from what moves all the time: free memory and disk counted in steps of their
    totals, engine gauges left out (a lease carries them). Equal digests: the control plane has nothing to learn
    from the report that a lease would not tell it. The agent's own business (which report to send); the control
    plane keys leases by its own token, never by this."""
    data = report.model_dump(mode="json")
    hw = data["hardware"]
    hw["mem_available_bytes"] = _step(report.hardware.mem_available_bytes, report.hardware.mem_total_bytes,
                                      MEMORY_STEPS)
    if report.hardware.disk is not None:
        hw["disk"]["free_bytes"] = _step(report.hardware.disk.free_bytes, report.hardware.disk.total_bytes, DISK_STEPS)
    for d, w in zip(data["weights_dirs"], report.weights_dirs, strict=True):
        d["free_bytes"] = _step(w.free_bytes, w.total_bytes, DISK_STEPS)
    for s in data["shards"]:
        s.pop("load", None)
    return hashlib.blake2b(json.dumps(data, sort_keys=True, separators=(",", ":")).encode(),
                           digest_size=16).hexdigest()


def loads_of(report: NodeReport) -> list[ShardLoad]:
    """The gauges a lease carries: each shard's, as the report has them."""
    return [ShardLoad(replica_id=s.replica_id, rank=s.rank, load=s.load) for s in report.shards]
