"""A placed replica's status, derived from what its nodes report. Level-triggered: same input, same answer."""

from __future__ import annotations

import ipaddress

from llmgw.core.conditions import Status
from llmgw.core.reasons import Reason, reason_or
from llmgw.reconcile.intents import Fail, Observe
from llmgw.reconcile.transitions import after
from llmgw.reconcile.transitions import stopped as stopped
from llmgw.records.state import NodeRecord, ReplicaRecord
from llmgw.wire.messages import ShardState

# what a node may say of its own shard: anything else it sends (NodeLost, AllShardsReady, ...) is the control
# plane's to say, and becomes the default
SHARD_REASONS = {Reason.WeightsUnusable, Reason.ModelNotLoaded, Reason.EngineExited, Reason.EngineUnresponsive,
                 Reason.ShardFailed, Reason.SidecarFailed, Reason.SidecarsStarting, Reason.Sleeping, Reason.SleepFailed,
                 Reason.SleepUnsupported, Reason.GPUUnused,
                 Reason.WeightsFetching, Reason.DigestMismatch, Reason.SizeMismatch, Reason.InsufficientDisk,
                 Reason.DownloadFailed, Reason.DiskFull}


def shard_reason(code: str, default: Reason) -> Reason:
    r = reason_or(code, default)
    return r if r in SHARD_REASONS else default


def _ready_state(s: ShardState) -> bool:
    # Ranks that serve HTTP say "ready" after a health probe; the others have nothing to probe.
    return s.state == "ready" or (s.state == "running" and not s.endpoint and s.rank > 0)


def derive(r: ReplicaRecord, nodes: dict[str, NodeRecord], now: float) -> ReplicaRecord:
    """The replica with failure, readiness and endpoint brought up to date."""
    seen = observe(r, nodes)
    return r if seen is None else after(r, seen, now)


def observe(r: ReplicaRecord, nodes: dict[str, NodeRecord], adapters: list[str] | None = None) -> Fail | Observe | None:
    """What the nodes' reports say of a placed, live replica: failed, or how ready (None: nothing to observe).
    `adapters`: its model's LoRA adapters now, which its leading shard's engine must have loaded, in that order, to
    be ready (an engine started before the catalog changed knows them by other indices: it is restarted)."""
    if r.failed or r.stop is not None or not r.assignments:
        return None
    states: dict[int, ShardState] = {}
    for a in r.assignments:
        node = nodes.get(a.node_id)
        if node is None or node.lost:
            return Fail(r.id, Reason.NodeLost, f"node {a.node_id} lost (rank {a.rank})")
        for s in node.report.shards:
            if s.replica_id == r.id and s.rank == a.rank:
                states[a.rank] = s
    broken = _broken(r, states)
    if broken is not None:
        return broken
    seen = tuple(sorted(set(r.seen_ranks) | set(states)))
    missing = [rank for rank in seen if rank not in states]
    if missing:
        return Fail(r.id, Reason.ShardMissing, f"rank(s) {missing} no longer reported by their node")
    if len(r.assignments) < r.shards_expected:
        return Fail(r.id, Reason.ShardMissing, f"{len(r.assignments)} of {r.shards_expected} shards assigned")
    if len(states) == r.shards_expected and all(_ready_state(s) for s in states.values()):
        lead = states.get(0)
        if adapters is not None and lead is not None and lead.adapters != adapters:
            return Observe(r.id, Status.FALSE, Reason.AdapterFailed, f"its engine loaded LoRA adapters "
                           f"[{', '.join(lead.adapters)}]; the catalog names [{', '.join(adapters)}]: restarted "
                           "with these", "", seen)
        return Observe(r.id, Status.TRUE, Reason.AllShardsReady, "", assigned_endpoint(r), seen)
    pending = ", ".join(
        f"rank {a.rank}: {states[a.rank].state}{' (' + states[a.rank].message + ')' if states[a.rank].message else ''}"
        if a.rank in states else f"rank {a.rank}: not yet started on {a.node_id}"
        for a in r.assignments
    )
    # a shard that says why it is not ready (ModelNotLoaded, EngineExited) names the reason; else still starting
    told = [shard_reason(s.reason, Reason.ShardsStarting) for s in states.values() if s.reason and not _ready_state(s)]
    return Observe(r.id, Status.FALSE, told[0] if told else Reason.ShardsStarting, pending, "", seen)


def _broken(r: ReplicaRecord, states: dict[int, ShardState]) -> Fail | None:
    """A shard that failed, or a multi-node group broken by a rank that exited."""
    for rank, s in sorted(states.items()):
        if s.state == "failed":
            # the node's code when it gave one we know (WeightsUnusable, ...), in its own words
            code = shard_reason(s.reason, Reason.ShardFailed)
            return Fail(r.id, code, f"rank {rank} on {_node_of(r, rank)} failed: {s.message}")
    # a group spanning nodes does not survive losing a member (a rank exits when its peer goes): restarting one rank
    # cannot bring it back, and waiting for the silent node's timer leaves it "starting" for a minute. A rank that
    # exited of itself is the cause; one that exited because a peer went names that peer, and its node
    exited = sorted((s.lost_peer is not None, rank) for rank, s in states.items() if s.state == "exited")
    if len(r.assignments) > 1 and exited:
        rank = exited[0][1]
        s = states[rank]
        why = f"rank {rank} on {_node_of(r, rank)} exited ({s.message or 'no reason given'}): the group is broken"
        if s.lost_peer is not None:
            role = "leader" if s.lost_peer == 0 else "worker"
            why = f"{role} rank {s.lost_peer} on {_node_of(r, s.lost_peer)} disconnected: {why}"
        return Fail(r.id, Reason.ShardFailed, why)
    return None


def _node_of(r: ReplicaRecord, rank: int) -> str:
    return next((a.node_id for a in r.assignments if a.rank == rank), "?")


def assigned_endpoint(r: ReplicaRecord) -> str:
    """Where the router sends: the leader's address and the port this control plane gave it. What a node reports as
    its endpoint is never used, or a node could point the router at any address it liked."""
    leader = next((a for a in r.assignments if a.rank == 0), None)
    if leader is None or leader.serve_port is None:
        return ""
    try:  # the address was checked at the door; checked again here, where it becomes part of a URL
        ip = ipaddress.ip_address(leader.address)
    except ValueError:
        return ""
    if "%" in leader.address or not 1 <= leader.serve_port <= 65535:
        return ""
    host = f"[{ip.compressed}]" if ip.version == 6 else ip.compressed
    return f"http://{host}:{leader.serve_port}"
