"""Where each model's weights stand, per model: what its source resolved to (or why it did not), and on every node
that holds, fetches, waits for or failed to fetch them, how far it got. Derived from the catalog, the nodes'
reports and the hub states the control plane keeps; never stored. ctl, the dashboard, the API and the metrics read
it, and `weights_lines` is the one place it becomes words.

A node counts for a model only through the model's pinned source (`hf://org/name@<commit>`, or the URL): a directory
of another commit of the same repository is neither held nor progress.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

from pydantic import BaseModel

from llmgw.config.server import ModelSpec
from llmgw.core.reasons import Reason
from llmgw.core.units import mb
from llmgw.records.state import NodeRecord, ReplicaRecord
from llmgw.wire.hub import HubState, is_hub, parse_hub
from llmgw.wire.messages import FetchStatus, is_remote

NodeWeightsState = Literal["held", "fetching", "waiting", "failed", "absent"]


class NodeWeights(BaseModel):
    """One live node's part in one model's weights: held whole, arriving, waited for, failed, or (a node with a
    shard of the model) neither held nor reported as a fetch."""

    node: str
    state: NodeWeightsState
    via: str = ""  # "origin", or the peer node copied from
    done_bytes: int = 0
    total_bytes: int | None = None
    done_files: int = 0
    total_files: int | None = None
    rate_bps: float = 0.0
    eta_s: float | None = None
    reason: str = ""
    message: str = ""  # the node's words (or, for "absent", what is missing)


class ModelWeights(BaseModel):
    """One catalog model whose nodes fetch its weights (a hub id or a URL)."""

    model: str
    source: str  # as the catalog names it
    kind: Literal["hub", "url"]
    pinned: str = ""  # what nodes are told and report: hf://org/name@<commit>, or the URL; "" while unresolved
    commit: str = ""
    resolved: bool = False  # a hub source: its revision resolved to a commit; a URL: always
    reason: str = ""  # why it is not resolved: HubResolving, HubUnreachable, HubAccessDenied, HubNotFound, ...
    message: str = ""  # in the words of the control plane's resolver (the hub's own, where it said any)
    since: float | None = None  # when the hub last answered (or was first asked)
    gated: bool = False
    total_bytes: int | None = None
    total_files: int | None = None
    held: int = 0  # live nodes holding it whole
    nodes: list[NodeWeights] = []


def model_weights(models: Mapping[str, ModelSpec], nodes: Iterable[NodeRecord], replicas: Iterable[ReplicaRecord],
                  hub: Mapping[str, HubState]) -> list[ModelWeights]:
    """Every catalog model with a fetched source, by name. `hub` is the control plane's hub state per model name;
    a hub model it has no state for is still resolving."""
    out = {name: _resolution(name, spec, hub.get(name)) for name, spec in sorted(models.items())
           if is_remote(spec.source)}
    if not out:
        return []  # a catalog of paths and engine-resolved ids: no node to look at (a scrape of 1,000 nodes)
    wanted: dict[str, list[ModelWeights]] = {}  # pinned source -> the models it is (two names may share one)
    for w in out.values():
        if w.pinned:
            wanted.setdefault(w.pinned, []).append(w)
    shards: dict[str, set[str]] = {}  # node -> the fetched models it has a shard of
    for r in replicas:
        if r.model in out and not r.released:
            for a in r.assignments:
                shards.setdefault(a.node_id, set()).add(r.model)
    for n in sorted(nodes, key=lambda n: n.id):
        if not n.lost:  # what a lost node last said is not what it has now
            _node_parts(n, wanted, shards.get(n.id, set()), out)
    return list(out.values())


def _node_parts(n: NodeRecord, wanted: dict[str, list[ModelWeights]], sharded: set[str],
                out: dict[str, ModelWeights]) -> None:
    """One node's part in each model: held whole, else its fetch of the pinned source, else (a shard of the model
    there) absent."""
    seen: set[str] = set()
    for src in n.report.weights:
        for w in wanted.get(src, ()):
            if w.model not in seen:
                seen.add(w.model)
                w.nodes.append(NodeWeights(node=n.id, state="held", done_bytes=w.total_bytes or 0,
                                           total_bytes=w.total_bytes, done_files=w.total_files or 0,
                                           total_files=w.total_files))
                w.held += 1
    for f in n.report.fetches:
        for w in wanted.get(f.source, ()):
            if w.model not in seen:
                seen.add(w.model)
                w.nodes.append(_fetching(n.id, f))
    for name in sorted(sharded - seen):
        out[name].nodes.append(_absent(n.id, out[name]))


def _resolution(name: str, spec: ModelSpec, state: HubState | None) -> ModelWeights:
    if not is_hub(spec.source):
        return ModelWeights(model=name, source=spec.source, kind="url", pinned=spec.source, resolved=True,
                            total_bytes=spec.size, total_files=1)
    if state is not None and state.resolution is not None:
        res = state.resolution
        # a reason beside a resolution: the commit stands, and something about it is wrong now (RevisionGone)
        return ModelWeights(model=name, source=spec.source, kind="hub", pinned=res.source, commit=res.commit,
                            resolved=True, reason=state.reason, message=state.message, since=state.since,
                            gated=res.gated, total_bytes=res.total_bytes, total_files=len(res.files))
    ref = parse_hub(spec.source)  # the catalog's sources are checked when read: this does not raise
    w = ModelWeights(model=name, source=spec.source, kind="hub", reason=Reason.HubResolving,
                     message="the control plane has not resolved this revision to a commit yet")
    if ref.pinned:  # the catalog names a commit: nodes holding that directory hold it, resolved or not
        w.pinned, w.commit = spec.source, ref.revision
    if state is not None:
        w.reason, w.since = state.reason or Reason.HubResolving, state.since
        w.message = state.message or w.message
    return w


def _fetching(node: str, f: FetchStatus) -> NodeWeights:
    return NodeWeights(node=node, state=f.state, via=f.via, done_bytes=f.done_bytes, total_bytes=f.total_bytes,
                       done_files=f.done_files, total_files=f.total_files, rate_bps=f.rate_bps, eta_s=f.eta_s,
                       reason=f.reason, message=f.message)


def _absent(node: str, w: ModelWeights) -> NodeWeights:
    if not w.pinned:
        words = f"has a shard of it; nothing to fetch until {w.source} is resolved"
    else:
        words = f"has a shard of it, and reports neither {w.pinned} whole nor a fetch of it"
    return NodeWeights(node=node, state="absent", total_bytes=w.total_bytes, total_files=w.total_files,
                       reason=w.reason or Reason.WeightsFetching, message=words)


def _of(done: int, total: int | None, unit: str) -> str:
    if unit == "bytes":
        return f"{mb(done)} of {mb(total)}" if total else mb(done)
    return f"{done} of {total} files" if total else ""


def node_weights_words(n: NodeWeights) -> str:
    """"3.1 GB of 16.0 GB, 2 of 7 files on node01 (copying from node02 at 80 MB/s, about 40 s left)", "node02:
    held whole", "node03: failed (DigestMismatch): ...", in the node's own words."""
    if n.state == "held":
        return f"{n.node}: held whole"
    if n.state == "fetching":
        amount = ", ".join(p for p in (_of(n.done_bytes, n.total_bytes, "bytes"),
                                       _of(n.done_files, n.total_files, "files")) if p)
        how = n.message or f"fetching via {n.via or 'origin'}"
        rate = f" at {mb(n.rate_bps)}/s" if n.rate_bps else ""
        eta = f", about {n.eta_s:.0f} s left" if n.eta_s is not None else ""
        return f"{amount} on {n.node} ({how}{rate}{eta})"
    if n.state == "failed":
        return f"{n.node}: failed" + (f" ({n.reason})" if n.reason else "") + (f": {n.message}" if n.message else "")
    return f"{n.node}: {n.state}" + (f": {n.message}" if n.message else "")


def weights_head(w: ModelWeights) -> str:
    """The model's weights in one line: what the source resolved to, or why it did not."""
    if not w.resolved:
        return f"{w.source}: {w.reason}: {w.message}"
    size = mb(w.total_bytes) if w.total_bytes is not None else "size not known"
    if w.kind == "url":
        return f"{w.source}: {size}"
    files = f"{w.total_files} file" + ("" if w.total_files == 1 else "s")
    at = "" if w.source == w.pinned else f" at commit {w.commit[:12]}"
    gated = " (gated: fetched with the hub token)" if w.gated else ""
    now = f"; {w.reason}: {w.message}" if w.reason else ""
    return f"{w.source}{at}: {size} in {files}{gated}{now}"


def weights_lines(w: ModelWeights) -> list[str]:
    """The head line, then each node's part; a model nobody holds or fetches says so."""
    lines = [weights_head(w)] + [node_weights_words(n) for n in w.nodes]
    if w.resolved and not w.nodes:
        lines.append("no live node holds or fetches it")
    return lines


def weights_trouble(w: ModelWeights) -> str:
    """Why this model's weights keep a replica from starting, in one line; "" when nothing does (held, or on its
    way without a failure)."""
    if not w.resolved:
        return weights_head(w)
    said = [weights_head(w)] if w.reason else []
    return "; ".join(said + [f"weights {node_weights_words(n)}" for n in w.nodes if n.state == "failed"])
