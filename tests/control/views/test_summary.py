"""One summary for ctl status, metrics and (later) the dashboard: faulty cards are neither used nor free."""

from __future__ import annotations

from prometheus_client import generate_latest

from llmgw.control.views.metrics import registry
from llmgw.control.views.summary import summarize
from llmgw.records.state import NodeRecord, ReplicaRecord, ShardAssignment
from tests.clusters import node


def cluster() -> tuple[list[NodeRecord], list[ReplicaRecord]]:
    nodes = [node("n1", fabric="ib-a", faulty=(7,)), node("n2", fabric="ib-a"), node("n3", fabric="ib-b"),
             node("n4", fabric="ib-b", lost=True)]
    reps = [ReplicaRecord(id="r1", model="m", created_at=0, shards_expected=1,
                          assignments=[ShardAssignment(rank=0, node_id="n1", address="a", gpus=[0, 1])])]
    return nodes, reps


def test_capacity_and_free_whole_nodes() -> None:
    nodes, reps = cluster()
    s = summarize(nodes, reps, [], {}, now=100.0)
    cap = s.capacity[0]
    assert (cap.total, cap.used, cap.faulty, cap.free) == (24, 2, 1, 21)  # the lost node counts for nothing
    assert {f.fabric: f.free_whole_nodes for f in s.fabrics} == {"ib-a": 1, "ib-b": 1}
    assert s.nodes_live == 3 and s.nodes_total == 4
    assert s.replicas[0].state == "starting"  # placed, not yet ready


def test_idle_means_ready_and_unused_for_a_while() -> None:
    from llmgw.core.conditions import ConditionType, Status, set_condition
    from llmgw.core.reasons import Reason

    nodes, reps = cluster()
    ready = set_condition([], ConditionType.Ready, Status.TRUE, Reason.AllShardsReady, "", 0)
    reps[0] = reps[0].model_copy(update={"conditions": ready, "endpoint": "http://a:1"})
    assert summarize(nodes, reps, [], {"r1": 90.0}, now=100.0, idle_after=300).idle_replicas == []
    assert summarize(nodes, reps, [], {"r1": 90.0}, now=1000.0, idle_after=300).idle_replicas == ["r1"]


def test_metrics_read_the_summary() -> None:
    nodes, reps = cluster()
    text = generate_latest(registry(lambda: summarize(nodes, reps, [], {}, now=1.0))).decode()
    assert 'llmgw_gpus{gpu_class="H100-80G",state="faulty"} 1.0' in text
    assert 'llmgw_nodes{state="lost"} 1.0' in text
    assert 'llmgw_fabric_free_whole_nodes{fabric="ib-a"} 1.0' in text


def test_metrics_carry_weights_held_per_fabric_and_fetches_under_way() -> None:
    from llmgw.wire.messages import FetchStatus

    nodes, reps = cluster()
    url = "https://models.example/m.gguf"
    fetch = FetchStatus(source=url, state="fetching", via="n2", done_bytes=1_000_000, total_bytes=4_000_000)
    nodes[0] = nodes[0].model_copy(update={"report": nodes[0].report.model_copy(update={"fetches": [fetch]})})
    nodes[1] = nodes[1].model_copy(update={"report": nodes[1].report.model_copy(update={"weights": [url]})})
    lost = nodes[3].model_copy(update={"report": nodes[3].report.model_copy(update={"fetches": [fetch]})})
    nodes[3] = lost  # a lost node's last report is no transfer under way
    text = generate_latest(registry(lambda: summarize(nodes, reps, [], {}, now=1.0, sources={url: ["m"]}))).decode()
    assert 'llmgw_fabric_models_held{fabric="ib-a",model="m"} 1.0' in text
    assert 'llmgw_fabric_models_held{fabric="ib-b"' not in text
    assert f'llmgw_weights_fetch_bytes{{node="n1",source="{url}",state="fetching",via="n2"}} 1e+06' in text
    assert f'llmgw_weights_fetch_total_bytes{{node="n1",source="{url}"}} 4e+06' in text
    assert 'node="n4"' not in text.split("llmgw_weights_fetch_bytes", 1)[1]
