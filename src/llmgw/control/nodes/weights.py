"""How each node is to have the remote weights of the shards it runs, decided for the whole fabric: one node of a
fabric fetches a file from its origin, the others wait for it and copy it from a node of their fabric that holds it
(the origin stays the fallback). Pure, over the nodes' reports and the replicas. The rules: docs/weights.md.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

from llmgw.config.server import ModelSpec
from llmgw.records.state import NodeRecord, ReplicaRecord
from llmgw.wire.hub import is_hub
from llmgw.wire.messages import NodeReport, WeightsPeer, WeightsPlan, is_remote

MAX_PEERS = 4


def _fabrics(r: NodeReport) -> set[str]:
    return {f.name for f in r.fabrics}


def _fetching_from_origin(r: NodeReport, source: str) -> bool:
    return any(f.source == source and f.state == "fetching" and f.via == "origin" for f in r.fetches)


def _failed(r: NodeReport, source: str) -> bool:
    return any(f.source == source and f.state == "failed" for f in r.fetches)


Leaders = dict[tuple[str, str], str]  # (fabric, source) -> the node chosen to fetch it from the origin


def plans_for(node_id: str, nodes: dict[str, NodeRecord], replicas: Iterable[ReplicaRecord],
              models: dict[str, ModelSpec], leaders: Leaders | None = None,
              revoked: frozenset[str] = frozenset(), hub: Mapping[str, WeightsPlan] | None = None,
              ) -> tuple[dict[str, WeightsPlan], Leaders]:
    """The plan for every remote source this node's shards use, and the origin fetchers chosen while making it.

    `leaders` are the choices made before: a choice stands while its node is live, wants the file and has not
    failed to fetch it, so nodes that report at different moments (or whose replicas are placed one by one) never
    see two different nodes told to fetch from the origin. A node or certificate in `revoked` is nobody's peer.
    `hub`: per pinned hub source (hf://org/name@<commit>), the plan its files start from; a hub source without one
    (not resolved) gets no plan."""
    me = nodes.get(node_id)
    if me is None:
        return {}, {}
    live = [r for r in replicas if not r.failed and r.stop is None and r.assignments]
    mine: dict[str, WeightsPlan] = {}  # source -> the plan it starts from
    wanting: dict[str, set[str]] = {}  # source -> nodes with a shard that uses it
    for r in live:
        spec = models.get(r.model)
        if spec is None:
            continue
        ids = {a.node_id for a in r.assignments}
        for source, base in remote_files(spec, hub or {}):
            wanting.setdefault(source, set()).update(ids)
            if node_id in ids:
                mine[source] = base
    if not mine:
        return {}, {}  # most reports: nothing of this node's is fetched, and the fabric need not be looked at
    fabrics = sorted(_fabrics(me.report))
    group = [n for n in nodes.values() if n.id != node_id and not n.lost and set(fabrics) & _fabrics(n.report)
             and n.id not in revoked and n.cert_serial not in revoked]
    plans: dict[str, WeightsPlan] = {}
    chosen: Leaders = {}
    for source, base in mine.items():
        plans[source], leader = _plan(me, group, source, base, wanting.get(source, set()), fabrics, leaders or {})
        if leader:
            theirs = _fabrics((nodes[leader] if leader in nodes else me).report)
            chosen.update({(f, source): leader for f in fabrics if f in theirs})  # only where it is a member
    return plans, chosen


def remote_files(spec: ModelSpec, hub: Mapping[str, WeightsPlan]) -> Iterable[tuple[str, WeightsPlan]]:
    """The model's files nodes fetch (its weights, its LoRA adapters'), each with the plan it starts from; a hub
    source not resolved yet has none."""
    if is_remote(spec.source) and (not is_hub(spec.source) or spec.source in hub):
        yield spec.source, hub.get(spec.source) or WeightsPlan(sha256=spec.sha256 or "", size=spec.size)
    for a in spec.adapters:
        if is_remote(a.source):
            yield a.source, WeightsPlan(sha256=a.sha256 or "", size=a.size)


def serves(n: NodeRecord) -> bool:
    """A node others can copy from: it listens for them."""
    return bool(n.report.peer_port)


def _plan(me: NodeRecord, group: list[NodeRecord], source: str, base: WeightsPlan, wanting: set[str],
          fabrics: list[str], leaders: Leaders) -> tuple[WeightsPlan, str]:
    holders = [n for n in group if source in n.report.weights and serves(n)]
    if holders:
        holders.sort(key=lambda n: hashlib.sha256(f"{me.id}/{n.id}".encode()).digest())
        peers = [WeightsPeer(node_id=n.id, address=n.report.address, port=n.report.peer_port)
                 for n in holders[:MAX_PEERS]]
        return base.model_copy(update={"peers": peers}), ""
    if not fabrics:
        return base, ""
    if _fetching_from_origin(me.report, source):
        return base, me.id
    members = {n.id: n for n in [me, *group]}
    wants = wanting | {me.id}

    def eligible(node_id: str) -> bool:
        n = members.get(node_id)
        return n is not None and node_id in wants and serves(n) and not _failed(n.report, source)

    # one already fetching (and able to pass it on); else one chosen before (another node before this one: a node
    # in two fabrics defers to either's choice); else the first eligible by name; when every node has failed once,
    # the first that can serve tries again alone rather than all of them at once
    fetching = sorted(n.id for n in group if n.id in wanting and serves(n) and _fetching_from_origin(n.report, source))
    before = sorted({leaders[(f, source)] for f in fabrics if (f, source) in leaders}, key=lambda x: (x == me.id, x))
    leader = next(iter(fetching), None) or next((x for x in before if eligible(x)), None) or next(
        (x for x in sorted(members) if eligible(x)), None) or next(
        (x for x in sorted(members) if x in wants and serves(members[x])), None)
    if leader is None or leader == me.id:
        return base, leader or ""
    return base.model_copy(update={"origin": False, "wait_for": leader}), leader


def prune(leaders: Leaders, nodes: dict[str, NodeRecord], sources: set[str]) -> Leaders:
    """The choices still worth remembering: a live node, in that fabric, for a file the catalog still names."""
    return {(f, src): n for (f, src), n in leaders.items() if src in sources and n in nodes and not nodes[n].lost
            and f in _fabrics(nodes[n].report)}
