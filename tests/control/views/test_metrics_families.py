"""The metrics families issue 12 names, with the values of a known cluster, all read from the one Summary."""

from __future__ import annotations

from collections import Counter

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from llmgw.api.stats import InFlight, ModelStats, RouterStats
from llmgw.control.views.metrics import FAMILIES, registry
from llmgw.control.views.summary import Demand, Summary, summarize
from llmgw.core.conditions import ConditionType, Status, set_condition
from llmgw.core.reasons import Reason
from llmgw.records.state import ReplicaRecord, ShardAssignment
from llmgw.store.base import UsageTotal
from llmgw.wire.messages import EngineLoad, InstallStatus, ShardState
from tests.clusters import model, node

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(s: Summary, counts: Counter[tuple[str, str, str]] | None = None) -> Samples:
    text = generate_latest(registry(lambda: s, replica_counts=lambda: counts or Counter())).decode()
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for x in fam.samples:
            out[(x.name, frozenset(x.labels.items()))] = x.value
    return out


def v(out: Samples, name: str, **labels: str) -> float | None:
    return out.get((name, frozenset(labels.items())))


def known() -> Summary:
    ready = set_condition([], ConditionType.Ready, Status.TRUE, Reason.AllShardsReady, "", 0)
    load = EngineLoad(running=3, waiting=2, kv_cache_usage=0.25, at=1.0)
    n1 = node("n1", fabric="ib-a", shards=[ShardState(replica_id="r1", rank=0, state="ready", load=load)])
    install = InstallStatus(engine="vllm", version="0.9", step="downloading", done_bytes=10, total_bytes=40)
    n2 = node("n2", fabric="ib-a", nvlink="unknown")
    n2 = n2.model_copy(update={"report": n2.report.model_copy(update={"installs": [install]})})
    reps = [ReplicaRecord(id="r1", model="m", created_at=0, shards_expected=1, conditions=ready, endpoint="http://a:1",
                          assignments=[ShardAssignment(rank=0, node_id="n1", address="a", gpus=[0, 1, 2, 3])])]
    stats = RouterStats(in_flight=[InFlight(key_id="k1", model="m", n=2)])
    ms = stats.models["m"] = ModelStats(requests={"200": 4, "499": 1}, prompt_tokens=40, completion_tokens=80)
    for t in (0.03, 0.2, 0.2, 7.0):
        ms.ttft.observe("ttft", t)
    ms.e2e.observe("e2e", 1.0)
    usage = [UsageTotal(key_id="k1", model="m", requests=9, prompt_tokens=90, completion_tokens=180, last_at=5.0)]
    recent = [UsageTotal(key_id="k1", model="m", requests=4, prompt_tokens=40, completion_tokens=80, last_at=5.0)]
    models = {"m": model("m"), "gone": model("gone", cls="B200-192G"), "od": model("od", min_=0, max_=1)}
    return summarize([n1, n2], reps, usage, {"r1": 99.0}, now=100.0, models=models,
                     demand=Demand(wanted_at={"od": 90.0}, window=60.0, in_flight={"r1": 2}), recent=recent,
                     key_names={"k1": "alice"}, requests=stats)


def test_router_measurements_are_exported_per_model() -> None:
    out = samples(known())
    assert v(out, "llmgw_requests_total", model="m", status="200") == 4
    assert v(out, "llmgw_requests_total", model="m", status="499") == 1
    assert v(out, "llmgw_prompt_tokens_total", model="m") == 40
    assert v(out, "llmgw_completion_tokens_total", model="m") == 80
    assert v(out, "llmgw_time_to_first_token_seconds_count", model="m") == 4
    assert v(out, "llmgw_time_to_first_token_seconds_bucket", model="m", le="0.05") == 1
    assert v(out, "llmgw_time_to_first_token_seconds_bucket", model="m", le="0.25") == 3
    assert v(out, "llmgw_time_to_first_token_seconds_bucket", model="m", le="+Inf") == 4
    assert abs((v(out, "llmgw_time_to_first_token_seconds_sum", model="m") or 0) - 7.43) < 1e-9
    assert v(out, "llmgw_request_duration_seconds_count", model="m") == 1
    assert v(out, "llmgw_time_between_tokens_seconds_count", model="m") == 0  # present, nothing observed
    assert v(out, "llmgw_requests_in_flight", key="k1", model="m") == 2


def test_cluster_models_nodes_and_engines_are_exported() -> None:
    out = samples(known())
    assert v(out, "llmgw_model_wanted_replicas", model="m") == 1
    assert v(out, "llmgw_model_ready_replicas", model="m") == 1
    assert v(out, "llmgw_model_wanted_replicas", model="gone") == 1  # min 1, nowhere to go
    assert v(out, "llmgw_model_ready_replicas", model="gone") == 0
    assert v(out, "llmgw_model_wanted_replicas", model="od") == 1  # asked for 10 s ago
    assert v(out, "llmgw_gpu_nvlink_peers", node="n1") == 7
    assert v(out, "llmgw_gpu_nvlink_peers", node="n2") == 0  # unknown reads as zero
    assert v(out, "llmgw_engine_requests_running", model="m", replica="r1", node="n1") == 3
    assert v(out, "llmgw_engine_requests_waiting", model="m", replica="r1", node="n1") == 2
    assert v(out, "llmgw_engine_kv_cache_usage_ratio", model="m", replica="r1", node="n1") == 0.25
    assert v(out, "llmgw_engine_install_bytes", node="n2", engine="vllm", version="0.9", step="downloading") == 10
    assert v(out, "llmgw_engine_install_total_bytes", node="n2", engine="vllm", version="0.9") == 40


def test_loads_evictions_and_scale_events_say_why() -> None:
    counts = Counter({("od", "start", "demand"): 2, ("m", "start", "wanted"): 1, ("od", "stop", "Evicted"): 1,
                      ("od", "stop", "Idle"): 1})
    out = samples(known(), counts)
    assert v(out, "llmgw_model_loads_total", model="od") == 2
    assert v(out, "llmgw_evictions_total", model="od") == 1
    assert v(out, "llmgw_scale_events_total", model="od", direction="down", reason="Idle") == 1
    assert v(out, "llmgw_scale_events_total", model="m", direction="up", reason="wanted") == 1


def test_preemptions_name_the_model_stopped_and_the_one_it_made_room_for() -> None:
    counts = Counter({("od", "stop", "Preempted"): 2, ("od", "preempted", "m"): 2})
    out = samples(known(), counts)
    assert v(out, "llmgw_preemptions_total", model="od", for_model="m") == 2
    assert v(out, "llmgw_scale_events_total", model="od", direction="down", reason="Preempted") == 2
    assert v(out, "llmgw_scale_events_total", model="od", direction="down", reason="m") is None


def test_every_family_exported_is_listed_and_every_listed_one_appears() -> None:
    out = samples(known(), Counter({("od", "start", "demand"): 1, ("od", "stop", "Evicted"): 1,
                                    ("od", "preempted", "m"): 1}))
    seen = {name.removesuffix("_bucket").removesuffix("_count").removesuffix("_sum").removesuffix("_total")
            for name, _ in out}
    listed = {f.removesuffix("_total") for f in FAMILIES}
    # the server's own, registered by it
    gauges = {"llmgw_store_writes_queued", "llmgw_store_unreachable_seconds", "llmgw_usage_unflushed"}
    assert seen <= listed
    # none in this cluster: no transfers, no shared weights, no disk reported, no conditions on these records, no
    # way to ready measured
    assert listed - gauges - seen == {"llmgw_weights_fetch_bytes", "llmgw_weights_fetch_total_bytes",
                                      "llmgw_weights_fetch_files", "llmgw_weights_fetch_total_files",
                                      "llmgw_hub_model_unresolved", "llmgw_fabric_models_held",
                                      "llmgw_node_condition", "llmgw_ready_seconds"}


def test_the_summary_names_usage_per_key_with_the_last_day_and_in_flight() -> None:
    s = known()
    u = s.usage[0]
    assert (u.key_name, u.requests, u.day_requests, u.day_completion_tokens, u.in_flight) == ("alice", 9, 4, 80, 2)
    r = s.replicas[0]
    assert r.load is not None and r.load.running == 3 and r.in_flight == 2
    gone = next(m for m in s.models if m.model == "gone")
    assert gone.why == ["no replica yet"]
    assert not next(n for n in s.nodes if n.node == "n2").nvlink_known
