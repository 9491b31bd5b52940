"""Which replicas serve which LoRA adapters, on every surface: the summary (ctl status, /api/status), the
dashboard and /metrics."""

from __future__ import annotations

from prometheus_client import generate_latest

from llmgw.config.serving import AdapterConfig
from llmgw.control.views.dashboard import render_view
from llmgw.control.views.metrics import registry
from llmgw.control.views.scrape import Scrape
from llmgw.control.views.summary import Summary, summarize
from llmgw.core.conditions import ConditionType, Status, set_condition
from llmgw.core.reasons import Reason
from llmgw.records.state import ReplicaRecord, ShardAssignment
from tests.clusters import model, node


def _summary() -> Summary:
    base = model(name="m", source="/w/m.gguf").model_copy(update={"adapters": [
        AdapterConfig(name="m-pirate", source="/w/p.gguf"), AdapterConfig(name="m-legal", source="/w/l.gguf")]})
    ready = set_condition([], ConditionType.Ready, Status.TRUE, Reason.AllShardsReady, "", 0)
    reps = [ReplicaRecord(id=f"m-{i}", model="m", created_at=0, shards_expected=1, endpoint="http://a:1",
                          conditions=ready if i < 2 else [],
                          assignments=[ShardAssignment(rank=0, node_id="n1", address="a", gpus=[i])])
            for i in range(3)]
    return summarize([node("n1")], reps, [], {}, now=100.0, models={"m": base, "other": model(name="other")})


def test_the_summary_names_each_adapter_with_the_ready_replicas_serving_it() -> None:
    lines = {a.adapter: (a.model, a.replicas) for a in _summary().adapters}
    assert lines == {"m-pirate": ("m", ["m-0", "m-1"]), "m-legal": ("m", ["m-0", "m-1"])}, "m-2 is not ready"


def test_metrics_say_which_replica_serves_which_adapter() -> None:
    s = _summary()
    text = generate_latest(registry(lambda: s)).decode()
    assert 'llmgw_adapter_replica{adapter="m-pirate",model="m",replica="m-1"} 1.0' in text
    assert 'replica="m-2"' not in text.split("llmgw_adapter_replica", 1)[1].split("# HELP", 1)[0]
    assert Scrape().text(s) == text.encode(), "the scrape the server serves writes it too"


def test_the_dashboard_lists_adapters() -> None:
    page = render_view(_summary())
    assert "<td>m-pirate</td><td>m</td><td>m-0, m-1</td>" in page
