"""The /admin page's view: the Summary rendered as HTML on the server, a page at a time (http/dashboard_routes.py
serves it, with the shell and the few lines of script that refresh it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape

from llmgw.api.adapter_lines import adapter_rows
from llmgw.api.model_weights import ModelWeights, NodeWeights, node_weights_words, weights_head
from llmgw.control.views.summary import ClassCapacity, NodeLine, ReplicaLine, Summary
from llmgw.core.conditions import ConditionType, Status
from llmgw.core.units import mb
from llmgw.records.state import Phase

PAGE = 100  # healthy nodes, and ready replicas, shown per page: the others are always shown
IDLE_NAMED = 50  # idle replicas named on the page, at most
# replicas shown on every page: not placed, not answering, failed (the rest are ready or on their way)
TROUBLED = frozenset({Phase.Pending, Phase.Unresponsive, Phase.Failed})


def e(v: object) -> str:
    return escape(str(v), quote=True)


def _bar(c: ClassCapacity) -> str:
    """Used, faulty and free cards as one bar: an SVG's attributes, not inline style (the policy forbids it)."""
    total = max(c.total, 1)
    used, faulty = 100 * c.used / total, 100 * c.faulty / total
    return (f'<svg class="bar" viewBox="0 0 100 6" preserveAspectRatio="none" role="img" '
            f'aria-label="{c.used} used, {c.faulty} faulty, {c.free} free of {c.total}">'
            f'<rect class="used" x="0" y="0" width="{used:.2f}" height="6"/>'
            f'<rect class="faulty" x="{used:.2f}" y="0" width="{faulty:.2f}" height="6"/></svg>')


def _table(cls: str, head: list[str], rows: list[str], empty: str) -> str:
    if not rows:
        return f'<p class="empty">{e(empty)}</p>'
    th = "".join(f"<th>{e(h)}</th>" for h in head)
    return f'<table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _capacity(s: Summary) -> str:
    rows = [f'<tr data-class="{e(c.gpu_class)}"><td>{e(c.gpu_class)}</td><td>{_bar(c)}</td>'
            f'<td class="n used">{c.used}</td><td class="n faulty">{c.faulty}</td><td class="n free">{c.free}</td>'
            f'<td class="n total">{c.total}</td></tr>' for c in s.capacity]
    return _table("capacity", ["GPU class", "", "used", "faulty", "free", "total"], rows, "no GPUs reported")


def _fabrics(s: Summary) -> str:
    rows = [f'<tr data-fabric="{e(f.fabric)}"><td>{e(f.fabric)}</td><td class="n nodes">{f.nodes}</td>'
            f'<td class="n free-whole">{f.free_whole_nodes}</td><td>{e(", ".join(f.models_held) or "-")}</td></tr>'
            for f in s.fabrics]
    return _table("fabrics", ["fabric", "nodes", "free whole nodes", "models held"], rows, "no fabrics")


def _node(n: NodeLine) -> str:
    warn = "".join(f"<li>{e(w)}</li>" for w in n.warnings[:8])
    more = f"<li>and {len(n.warnings) - 8} more</li>" if len(n.warnings) > 8 else ""
    disk = f"{mb(n.disk_free_bytes)} free of {mb(n.disk_total_bytes)}" if n.disk_total_bytes else "-"
    nvl = "" if n.nvlink_known else ' <span class="tag">NVLink unknown</span>'
    cls = "live" if n.state == "live" else "down"
    return (f'<tr class="{cls}" data-node="{e(n.node)}"><td>{e(n.node)}</td><td class="state">{e(n.state)}</td>'
            f"<td>{e(n.gpus)}{nvl}</td><td>{e(n.ram)}</td><td>{e(disk)}</td><td>{e(n.engines)}</td>"
            f"<td>{e(n.fabrics)}</td><td>{len(n.weights)}</td>"
            f'<td class="warnings"><ul>{warn}{more}</ul></td></tr>')


def _replica(r: ReplicaLine) -> str:
    code = r.reason.value if r.reason is not None else ""
    why = "; ".join(r.placement) or (f"{code}: {r.message}" if code and r.message else r.message)
    if not why and r.state.value != "ready":
        why = code
    load = ""
    if r.load is not None:
        parts = [f"{k} {v:g}" for k, v in (("running", r.load.running), ("waiting", r.load.waiting)) if v is not None]
        if r.load.kv_cache_usage is not None:
            parts.append(f"KV {100 * r.load.kv_cache_usage:.0f}%")
        load = ", ".join(parts)
    return (f'<tr class="{e(r.state.value)}" data-replica="{e(r.id)}"><td>{e(r.model)}</td><td>{e(r.id)}</td>'
            f'<td class="phase">{e(r.state.value)}</td><td>{e(", ".join(r.nodes) or "-")}</td>'
            f'<td class="n">{r.in_flight}</td><td>{e(load or "-")}</td><td class="why">{e(why)}</td></tr>')


def _models(s: Summary) -> str:
    rows = [f'<tr data-model="{e(m.model)}"><td>{e(m.model)}</td><td>{e(m.engine)}</td>'
            f'<td class="n wanted">{m.wanted}</td><td class="n ready">{m.ready}</td>'
            f'<td class="why">{e(" | ".join(m.why))}</td></tr>' for m in s.models]
    return _table("models", ["model", "engine", "wanted", "ready", "why not"], rows, "no models in the catalog")


def _adapters(s: Summary) -> str:
    rows = [f"<tr><td>{e(a)}</td><td>{e(m)}</td><td>{e(r)}</td></tr>" for a, m, r in adapter_rows(s.adapters)]
    return _table("adapters", ["LoRA adapter", "model", "ready replicas serving it"], rows, "") if rows else ""


def _progress(n: NodeWeights) -> str:
    """How much of the model a node has, as a bar (by bytes, else by files); nothing when neither total is known."""
    done, total = (n.done_bytes, n.total_bytes) if n.total_bytes else (n.done_files, n.total_files)
    if not total:
        return ""
    part = min(100.0, 100 * done / total)
    return (f'<svg class="bar" viewBox="0 0 100 6" preserveAspectRatio="none" role="img" '
            f'aria-label="{part:.0f}%"><rect class="used" x="0" y="0" width="{part:.2f}" height="6"/></svg> ')


def _model_weights(w: ModelWeights) -> str:
    nodes = "".join(f'<li class="{e(n.state)}" data-node="{e(n.node)}">{_progress(n)}{e(node_weights_words(n))}</li>'
                    for n in w.nodes)
    if not nodes and w.resolved:
        nodes = '<li class="absent">no live node holds or fetches it</li>'
    cls = "resolved" if w.resolved else "unresolved"
    return (f'<tr class="{cls}" data-model="{e(w.model)}"><td>{e(w.model)}</td><td class="head">{e(weights_head(w))}'
            f'</td><td class="n held">{w.held}</td><td class="nodes"><ul>{nodes}</ul></td></tr>')


def _weights(s: Summary) -> str:
    return _table("weights", ["model", "source", "held by", "nodes"], [_model_weights(w) for w in s.weights],
                  "no model's weights are fetched by the nodes (paths and engine-resolved ids only)")


def _usage(s: Summary) -> str:
    rows = [f'<tr data-key="{e(u.key_id)}" data-model="{e(u.model)}"><td>{e(u.key_name or u.key_id)}</td>'
            f'<td>{e(u.model)}</td><td class="n in-flight">{u.in_flight}</td><td class="n">{u.day_requests}</td>'
            f'<td class="n">{u.day_prompt_tokens + u.day_completion_tokens}</td>'
            f'<td class="n requests">{u.requests}</td><td class="n">{u.prompt_tokens}</td>'
            f'<td class="n">{u.completion_tokens}</td></tr>' for u in s.usage]
    return _table("usage", ["key", "model", "in flight", "requests 24 h", "tokens 24 h", "requests", "prompt tokens",
                            "completion tokens"], rows, "no usage recorded yet")


def _gpu_time(s: Summary) -> str:
    """GPU-seconds and cost per key over the last day, the operator's share named and last."""
    rows = [f'<tr data-key="{e(k.key_id)}"><td class="name">{e(k.name or k.key_id)}</td>'
            f'<td class="n gpu-seconds">{k.gpu_seconds:.1f}</td><td class="n busy">{k.busy_s:.1f}</td>'
            f'<td class="n load">{k.load_s:.1f}</td><td class="n idle">{k.idle_s:.1f}</td>'
            f'<td class="n cost">{k.cost:.4f}</td></tr>' for k in s.gpu_time.keys]
    return _table("gpu-time", ["key", "GPU-s 24 h", "busy", "load", "idle", f"cost 24 h ({s.gpu_time.currency})"],
                  rows, "no GPU time charged in the last 24 hours")


@dataclass
class Rows:
    """Each node's and replica's row as HTML, with whether it is in trouble: made once per line (a line is kept
    per record: NodeFacts, ReplicaLines), not at every view; lines no longer shown are forgotten."""

    nodes: dict[str, tuple[NodeLine, str, bool]] = field(default_factory=dict)
    replicas: dict[str, tuple[ReplicaLine, str, bool]] = field(default_factory=dict)

    def node_rows(self, lines: list[NodeLine]) -> list[tuple[str, bool]]:
        held, self.nodes = self.nodes, {}
        for n in lines:
            h = held.get(n.node)
            self.nodes[n.node] = h if h is not None and h[0] is n else (n, _node(n), node_troubled(n))
        return [(h[1], h[2]) for h in self.nodes.values()]

    def replica_rows(self, lines: list[ReplicaLine]) -> list[tuple[str, bool]]:
        held, self.replicas = self.replicas, {}
        for r in lines:
            h = held.get(r.id)
            self.replicas[r.id] = h if h is not None and h[0] is r else (r, _replica(r), r.state in TROUBLED)
        return [(h[1], h[2]) for h in self.replicas.values()]


def node_troubled(n: NodeLine) -> bool:
    """Shown on every page: not live, a condition not in its good state (True, for every node condition: faulty
    GPUs make GPUsHealthy False) but CPUFeatures (advice: the node is usable), or words from the node (its
    problems, engines, transfers)."""
    return n.state != "live" or bool(n.warnings) or any(
        c.status is not Status.TRUE and c.type is not ConditionType.CPUFeatures for c in n.conditions)


def _paged(what: str, rest: str, rows: list[tuple[str, bool]], page: int) -> tuple[list[str], str]:
    """Every troubled row, and one page of the rest, with a line saying how many are not shown and links to the
    pages beside this one (the script follows them)."""
    healthy = sum(1 for _, troubled in rows if not troubled)
    if healthy <= PAGE:
        return [html for html, _ in rows], ""
    pages = -(-healthy // PAGE)
    page = min(page, pages)
    lo, hi, k, out = (page - 1) * PAGE, page * PAGE, 0, []
    for html, troubled in rows:
        if troubled or lo <= k < hi:
            out.append(html)
        k += not troubled
    links = "".join(f' <a href="#" data-page="{p}">{word}</a>'
                    for p, word in ((page - 1, "previous"), (page + 1, "next")) if 1 <= p <= pages)
    note = (f'<p class="pager" data-what="{what}">{len(rows) - len(out)} {rest} not shown: page '
            f'<b class="page">{page}</b> of {pages} ({PAGE} a page; every one in trouble is shown){links}</p>')
    return out, note


def render_view(s: Summary, page: int = 1, rows: Rows | None = None) -> str:
    """The page's contents: every number and word comes from the Summary, escaped. Nodes and replicas in trouble
    are all shown; the healthy rest a page at a time."""
    rows = rows or Rows()
    nodes, node_note = _paged("nodes", "healthy nodes", rows.node_rows(s.nodes), page)
    reps, rep_note = _paged("replicas", "replicas ready, starting or stopping", rows.replica_rows(s.replicas), page)
    idle = ""
    if s.idle_replicas:
        names = e(", ".join(s.idle_replicas[:IDLE_NAMED]))
        more = f" and {len(s.idle_replicas) - IDLE_NAMED} more" if len(s.idle_replicas) > IDLE_NAMED else ""
        idle = f'<p class="idle">{len(s.idle_replicas)} ready replica(s) unused lately: {names}{more}</p>'
    return "".join([
        f'<p class="counts">nodes: <b id="nodes-live">{s.nodes_live}</b> live of '
        f'<b id="nodes-total">{s.nodes_total}</b> · replicas: <b id="replicas-total">{len(s.replicas)}</b></p>',
        "<section><h2>GPUs</h2>", _capacity(s), "</section>",
        "<section><h2>Fabrics</h2>", _fabrics(s), "</section>",
        "<section><h2>Models</h2>", _models(s), _adapters(s), "</section>",
        "<section><h2>Weights</h2>", _weights(s), "</section>",
        "<section><h2>Replicas</h2>", idle, rep_note,
        _table("replicas", ["model", "replica", "phase", "nodes", "in flight", "engine load", "why"], reps,
               "no replicas"), "</section>",
        "<section><h2>Nodes</h2>", node_note,
        _table("nodes", ["node", "state", "GPUs", "memory", "disk", "engines", "fabrics", "weights", "warnings"],
               nodes, "no nodes have registered"), "</section>",
        "<section><h2>Usage</h2>", _usage(s), "</section>",
        "<section><h2>GPU time and cost</h2>", _gpu_time(s), "</section>",
    ])
