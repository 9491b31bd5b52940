"""Prometheus metrics, read from the same Summary the CLI, the API and the dashboard use.

Every family is rebuilt from the Summary at each scrape: nothing here keeps state of its own, so a metric can
never say something the summary does not. Engine-neutral names throughout: an engine's own gauges arrive under
llmgw's names (the agent maps them, agent/engines), so one dashboard and one alert serve every engine.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from llmgw.api.stats import BUCKETS, Histogram
from llmgw.control.nodes.ready_times import ready_family
from llmgw.control.views.summary import NodeLine, ReplicaLine, Summary
from llmgw.core.conditions import ConditionType, Status

# The control plane's own health, beside the cluster's: name -> (help, how to read it now)
Gauges = dict[str, tuple[str, Callable[[], float]]]
# replicas started and stopped, and why: (model, "start" | "stop", why) -> count since the server started
ReplicaCounts = Callable[[], Counter[tuple[str, str, str]]]

HISTOGRAMS = {
    "ttft": ("llmgw_time_to_first_token_seconds", "From a request's arrival to the first token of its stream, "
             "as the router saw it (load and queue waits included)"),
    "tbt": ("llmgw_time_between_tokens_seconds", "A stream's time per output token after the first (one "
            "observation per request: its mean)"),
    "queue": ("llmgw_queue_wait_seconds", "Time a request waited for its model to load (or for any replica of it "
              "to be ready)"),
    "e2e": ("llmgw_request_duration_seconds", "From a request's arrival to its last byte, as the router saw it"),
}

# Every family this exporter can produce (the monitoring rules may name only these: tests/deploy checks).
FAMILIES = frozenset({
    "llmgw_nodes", "llmgw_gpus", "llmgw_fabric_free_whole_nodes", "llmgw_replicas", "llmgw_node_condition",
    "llmgw_replica_phase", "llmgw_fabric_models_held", "llmgw_weights_fetch_bytes", "llmgw_weights_fetch_total_bytes",
    "llmgw_weights_fetch_files", "llmgw_weights_fetch_total_files", "llmgw_hub_model_unresolved",
    "llmgw_idle_replicas", "llmgw_model_wanted_replicas", "llmgw_model_ready_replicas", "llmgw_gpu_nvlink_peers",
    "llmgw_engine_install_bytes",
    "llmgw_engine_install_total_bytes", "llmgw_engine_requests_running", "llmgw_engine_requests_waiting",
    "llmgw_engine_kv_cache_usage_ratio", "llmgw_requests_total", "llmgw_prompt_tokens_total",
    "llmgw_completion_tokens_total", "llmgw_token_overruns_total", "llmgw_requests_in_flight",
    "llmgw_model_loads_total", "llmgw_evictions_total", "llmgw_preemptions_total",
    "llmgw_scale_events_total", "llmgw_store_writes_queued", "llmgw_store_unreachable_seconds",
    "llmgw_usage_unflushed", "llmgw_ready_seconds",
    *(name for name, _ in HISTOGRAMS.values()),
})


def _buckets(kind: str, h: Histogram) -> list[tuple[str, float]]:
    bounds = BUCKETS[kind]
    counts = h.counts or [0] * (len(bounds) + 1)
    out, running = [], 0
    for bound, c in zip((*(str(b) for b in bounds), "+Inf"), counts, strict=False):
        running += c
        out.append((bound, float(running)))
    return out


class SummaryCollector(Collector):
    def __init__(self, summary: Callable[[], Summary], gauges: Gauges | None = None,
                 replica_counts: ReplicaCounts | None = None) -> None:
        self.summary = summary
        self.gauges = gauges if gauges is not None else {}
        self.replica_counts = replica_counts

    def collect(self) -> Iterator[Metric]:
        yield from own_gauges(self.gauges)
        s = self.summary()
        yield from cluster_families(s)
        yield from self._nodes(s)
        yield from self._models(s)
        yield from requests_families(s)
        yield adapter_family(s)
        yield ready_family(s.ready_times)
        if self.replica_counts is not None:
            yield from replica_events(self.replica_counts())

    def _nodes(self, s: Summary) -> Iterable[Metric]:
        fams = node_families()
        for n in s.nodes:
            node_samples(fams, n)
        yield from fams
        yield unresolved(s)

    def _models(self, s: Summary) -> Iterable[Metric]:
        yield replica_counts(s)
        fams = replica_families()
        for r in s.replicas:
            replica_samples(fams, r)
        yield from fams
        yield from model_lines(s)

def own_gauges(gauges: Gauges) -> Iterable[Metric]:
    for name, (doc, read) in sorted(gauges.items()):
        g = GaugeMetricFamily(name, doc)
        g.add_metric([], read())
        yield g


def cluster_families(s: Summary) -> Iterable[Metric]:
    nodes = GaugeMetricFamily("llmgw_nodes", "Nodes known, by liveness", labels=["state"])
    nodes.add_metric(["live"], s.nodes_live)
    nodes.add_metric(["lost"], s.nodes_total - s.nodes_live)
    yield nodes
    gpus = GaugeMetricFamily(
        "llmgw_gpus", "GPUs by class and state (faulty are neither used nor free)", labels=["gpu_class", "state"]
    )
    for c in s.capacity:
        for state, v in (("used", c.used), ("free", c.free), ("faulty", c.faulty)):
            gpus.add_metric([c.gpu_class, state], v)
    yield gpus
    fab = GaugeMetricFamily("llmgw_fabric_free_whole_nodes", "Whole nodes free per fabric", labels=["fabric"])
    held = GaugeMetricFamily("llmgw_fabric_models_held", "1 for each model whose weights a live node of the "
                             "fabric holds", labels=["fabric", "model"])
    for f in s.fabrics:
        fab.add_metric([f.fabric], f.free_whole_nodes)
        for model in f.models_held:
            held.add_metric([f.fabric, model], 1)
    yield fab
    yield held
    idle = GaugeMetricFamily("llmgw_idle_replicas", "Ready replicas nobody has used recently")
    idle.add_metric([], len(s.idle_replicas))
    yield idle


def requests_families(s: Summary) -> Iterable[Metric]:
    reqs = CounterMetricFamily("llmgw_requests", "Requests answered, per model and the status they are "
                               "recorded with (model \"\": refused before naming one)", labels=["model", "status"])
    prompt = CounterMetricFamily("llmgw_prompt_tokens", "Prompt tokens, as the engines counted them",
                                 labels=["model"])
    completion = CounterMetricFamily("llmgw_completion_tokens", "Completion tokens, as the engines counted them",
                                     labels=["model"])
    overruns = CounterMetricFamily("llmgw_token_overruns", "Requests an engine reported more tokens for than "
                                   "they reserved (recorded at the reservation) or streamed past them (cut "
                                   "there): an engine ignoring its bound", labels=["model"])
    hists = {kind: HistogramMetricFamily(name, doc, labels=["model"]) for kind, (name, doc) in HISTOGRAMS.items()}
    for model, ms in sorted(s.requests.models.items()):
        for status, n in sorted(ms.requests.items()):
            reqs.add_metric([model, status], n)
        prompt.add_metric([model], ms.prompt_tokens)
        completion.add_metric([model], ms.completion_tokens)
        overruns.add_metric([model], ms.overruns)
        for kind, fam in hists.items():
            h: Histogram = getattr(ms, kind)
            fam.add_metric([model], _buckets(kind, h), h.sum)
    flying = GaugeMetricFamily("llmgw_requests_in_flight", "Requests the routers have open now, per API key "
                               "(its id) and model", labels=["key", "model"])
    for f in s.requests.in_flight:
        flying.add_metric([f.key_id, f.model], f.n)
    yield from (reqs, prompt, completion, overruns, *hists.values(), flying)


def node_families() -> tuple[GaugeMetricFamily, ...]:
    """The families with one node's samples each (conditions, NVLink, installs, transfers), empty."""
    # Ready for every node; the others only while not True (their good state): six series per node would be
    # most of a 1,000-node scrape, and an alert asks "which nodes are not ...", which an absent series answers
    conds = GaugeMetricFamily(
        "llmgw_node_condition", "A node's conditions: 1 for the status and reason each has now (Ready always; "
        "the others only while not True, so an absent series means True)",
        labels=["node", "type", "status", "reason"],
    )
    # one sample per node, not per card: at 1,000 nodes of 8 cards a scrape would otherwise be mostly this
    nvlink = GaugeMetricFamily("llmgw_gpu_nvlink_peers", "The fewest GPUs any healthy GPU of a node reaches over "
                               "NVLink (7 on an 8-card NVSwitch node, 1 on bridged pairs; 0 also where the node "
                               "could not read its topology: a flat zero across a fleet means unknown)",
                               labels=["node"])
    inst = GaugeMetricFamily("llmgw_engine_install_bytes", "Bytes of an engine install downloaded so far, by "
                             "step", labels=["node", "engine", "version", "step"])
    inst_total = GaugeMetricFamily("llmgw_engine_install_total_bytes", "The size of an engine install's "
                                   "download, when known", labels=["node", "engine", "version"])
    # transfers live nodes report (bytes; files for a model directory)
    done = GaugeMetricFamily("llmgw_weights_fetch_bytes", "Bytes of a weights file a node has so far, by where "
                             "they come from (origin or the peer node) and the transfer's state",
                             labels=["node", "source", "via", "state"])
    total = GaugeMetricFamily("llmgw_weights_fetch_total_bytes", "The size of a weights file being fetched, "
                              "when known", labels=["node", "source"])
    files = GaugeMetricFamily("llmgw_weights_fetch_files", "Files of a model directory (a hub source) a node "
                              "holds whole so far, by the transfer's state", labels=["node", "source", "state"])
    total_files = GaugeMetricFamily("llmgw_weights_fetch_total_files", "The files of a model directory being "
                                    "fetched", labels=["node", "source"])
    return conds, nvlink, inst, inst_total, done, total, files, total_files


def node_samples(fams: tuple[GaugeMetricFamily, ...], n: NodeLine) -> None:
    """One node's samples, added to node_families()."""
    conds, nvlink, inst, inst_total, done, total, files, total_files = fams
    ready, true = ConditionType.Ready, Status.TRUE
    for nc in n.conditions:
        if nc.type is ready or nc.status is not true:
            conds.add_metric([n.node, nc.type, nc.status, nc.reason], 1)  # str enums: their values
    if not n.live:
        return
    if n.nvlink_min is not None:
        nvlink.add_metric([n.node], n.nvlink_min)
    for i in n.installs:
        inst.add_metric([n.node, i.engine, i.version, i.step], i.done_bytes)
        if i.total_bytes is not None:
            inst_total.add_metric([n.node, i.engine, i.version], i.total_bytes)
    for fs in n.fetches:
        done.add_metric([n.node, fs.source, fs.via, fs.state], fs.done_bytes)
        if fs.total_bytes is not None:
            total.add_metric([n.node, fs.source], fs.total_bytes)
        if fs.total_files is not None:  # a single file's transfer has no files to count
            files.add_metric([n.node, fs.source, fs.state], fs.done_files)
            total_files.add_metric([n.node, fs.source], fs.total_files)


def unresolved(s: Summary) -> Metric:
    fam = GaugeMetricFamily("llmgw_hub_model_unresolved", "1 for each catalog model whose hub source the control "
                            "plane has not resolved to a commit, with the reason (its words: ctl models)",
                            labels=["model", "reason"])
    for w in s.weights:
        if not w.resolved:
            fam.add_metric([w.model, w.reason], 1)
    return fam


def replica_counts(s: Summary) -> Metric:
    reps = GaugeMetricFamily("llmgw_replicas", "Replicas by model and state", labels=["model", "state"])
    counts = Counter((r.model, r.state) for r in s.replicas)  # the phase's value read once per pair, not per replica
    for (m, st), v in sorted(counts.items()):
        reps.add_metric([m, st.value], v)
    return reps


def replica_families() -> tuple[GaugeMetricFamily, ...]:
    """The families with one replica's samples each (its phase, its engine's gauges), empty."""
    phases = GaugeMetricFamily(
        "llmgw_replica_phase", "Each replica's phase and the reason code for it (its words: ctl explain)",
        labels=["replica", "model", "phase", "reason"],
    )
    running = GaugeMetricFamily("llmgw_engine_requests_running", "Requests an engine is generating now (its "
                                "own gauge)", labels=["model", "replica", "node"])
    waiting = GaugeMetricFamily("llmgw_engine_requests_waiting", "Requests queued inside an engine (its own "
                                "gauge)", labels=["model", "replica", "node"])
    kv = GaugeMetricFamily("llmgw_engine_kv_cache_usage_ratio", "Fraction of an engine's KV cache in use, "
                           "where the engine says", labels=["model", "replica", "node"])
    return phases, running, waiting, kv


def replica_samples(fams: tuple[GaugeMetricFamily, ...], r: ReplicaLine) -> None:
    """One replica's samples, added to replica_families()."""
    phases, running, waiting, kv = fams
    phases.add_metric([r.id, r.model, r.state.value, r.reason.value if r.reason else ""], 1)
    if r.load is None:
        return
    where = [r.model, r.id, r.nodes[0] if r.nodes else ""]
    for fam, value in ((running, r.load.running), (waiting, r.load.waiting), (kv, r.load.kv_cache_usage)):
        if value is not None:
            fam.add_metric(where, value)


def model_lines(s: Summary) -> Iterable[Metric]:
    wanted = GaugeMetricFamily("llmgw_model_wanted_replicas", "Replicas the catalog and recent demand want "
                               "for a model now", labels=["model"])
    ready = GaugeMetricFamily("llmgw_model_ready_replicas", "A model's replicas that serve", labels=["model"])
    for line in s.models:
        wanted.add_metric([line.model], line.wanted)
        ready.add_metric([line.model], line.ready)
    return wanted, ready


def adapter_family(s: Summary) -> Metric:
    fam = GaugeMetricFamily("llmgw_adapter_replica", "1 for each ready replica serving a LoRA adapter (a model of "
                            "its own, served by its base model's replicas)", labels=["adapter", "model", "replica"])
    for line in s.adapters:
        for rid in line.replicas:
            fam.add_metric([line.adapter, line.model, rid], 1)
    return fam


def replica_events(counts: Counter[tuple[str, str, str]]) -> Iterable[Metric]:
    loads = CounterMetricFamily("llmgw_model_loads", "Replicas started because a request asked for an on-demand "
                                "model", labels=["model"])
    evictions = CounterMetricFamily("llmgw_evictions", "Idle replicas stopped to make room for another model",
                                    labels=["model"])
    scale = CounterMetricFamily("llmgw_scale_events", "Replicas started (up) and stopped (down), and why",
                                labels=["model", "direction", "reason"])
    preempted = CounterMetricFamily("llmgw_preemptions", "Replicas stopped to make room for a model of higher "
                                    "priority (for_model)", labels=["model", "for_model"])
    for (model, what, why), n in sorted(counts.items()):
        if what == "preempted":
            preempted.add_metric([model, why], n)
        elif what == "start":
            scale.add_metric([model, "up", why], n)
            if why == "demand":
                loads.add_metric([model], n)
        else:
            scale.add_metric([model, "down", why], n)
            if why == "Evicted":
                evictions.add_metric([model], n)
    yield from (loads, evictions, scale, preempted)


def registry(summary: Callable[[], Summary], gauges: Gauges | None = None,
             replica_counts: ReplicaCounts | None = None) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SummaryCollector(summary, gauges, replica_counts))
    return reg
