"""Prometheus metrics, read from the same Summary the CLI and the dashboard use."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from llmgw.control.summary import Summary

# The control plane's own health, beside the cluster's: name -> (help, how to read it now)
Gauges = dict[str, tuple[str, Callable[[], float]]]


class SummaryCollector(Collector):
    def __init__(self, summary: Callable[[], Summary], gauges: Gauges | None = None) -> None:
        self.summary = summary
        self.gauges = gauges if gauges is not None else {}

    def collect(self) -> Iterator[Metric]:
        for name, (doc, read) in sorted(self.gauges.items()):
            g = GaugeMetricFamily(name, doc)
            g.add_metric([], read())
            yield g
        s = self.summary()
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
        for f in s.fabrics:
            fab.add_metric([f.fabric], f.free_whole_nodes)
        yield fab
        reps = GaugeMetricFamily("llmgw_replicas", "Replicas by model and state", labels=["model", "state"])
        counts: dict[tuple[str, str], int] = {}
        for r in s.replicas:
            counts[(r.model, r.state.value)] = counts.get((r.model, r.state.value), 0) + 1
        for (m, st), v in sorted(counts.items()):
            reps.add_metric([m, st], v)
        yield reps
        conds = GaugeMetricFamily(
            "llmgw_node_condition", "A node's conditions: 1 for the status and reason each one has now",
            labels=["node", "type", "status", "reason"],
        )
        for n in s.nodes:
            for nc in n.conditions:
                conds.add_metric([n.node, nc.type.value, nc.status.value, nc.reason.value], 1)
        yield conds
        phases = GaugeMetricFamily(
            "llmgw_replica_phase", "Each replica's phase and the reason code for it (its words: ctl explain)",
            labels=["replica", "model", "phase", "reason"],
        )
        for r in s.replicas:
            phases.add_metric([r.id, r.model, r.state.value, r.reason.value if r.reason else ""], 1)
        yield phases
        held = GaugeMetricFamily("llmgw_fabric_models_held", "1 for each model whose weights a live node of the "
                                 "fabric holds", labels=["fabric", "model"])
        for f in s.fabrics:
            for model in f.models_held:
                held.add_metric([f.fabric, model], 1)
        yield held
        done = GaugeMetricFamily("llmgw_weights_fetch_bytes", "Bytes of a weights file a node has so far, by where "
                                 "they come from (origin or the peer node) and the transfer's state",
                                 labels=["node", "source", "via", "state"])
        total = GaugeMetricFamily("llmgw_weights_fetch_total_bytes", "The size of a weights file being fetched, "
                                  "when known", labels=["node", "source"])
        for n in s.nodes:
            for fs in n.fetches:
                done.add_metric([n.node, fs.source, fs.via, fs.state], fs.done_bytes)
                if fs.total_bytes is not None:
                    total.add_metric([n.node, fs.source], fs.total_bytes)
        yield done
        yield total
        idle = GaugeMetricFamily("llmgw_idle_replicas", "Ready replicas nobody has used recently")
        idle.add_metric([], len(s.idle_replicas))
        yield idle


def registry(summary: Callable[[], Summary], gauges: Gauges | None = None) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SummaryCollector(summary, gauges))
    return reg
