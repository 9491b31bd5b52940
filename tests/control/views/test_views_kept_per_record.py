"""What a page view, a scrape and /api/status derive of each node and replica is kept per record and written again
when the record changes; the scrape written from kept samples says byte for byte what prometheus_client says; the
page shows every node and replica in trouble and the healthy rest a page at a time."""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from llmgw.control.views.dashboard import PAGE, Rows, render_view
from llmgw.control.views.metrics import Gauges, registry
from llmgw.control.views.scrape import Scrape
from llmgw.control.views.status import NodeFactsKept, StatusJson
from llmgw.control.views.summary import ReplicaLines, Summary, summarize
from llmgw.core.conditions import ConditionType, Status, set_condition
from llmgw.core.reasons import Reason
from llmgw.records.state import NodeRecord, ReplicaRecord, ShardAssignment, StopRequest
from llmgw.wire.messages import EngineLoad, InstallStatus, ShardState
from tests.clusters import model, node
from tests.control.http.test_admin_input import call
from tests.control.views.test_metrics_families import known
from tests.deploy.test_monitoring import find_promtool
from tests.harness import InProcessServer, plan

COUNTS = Counter({("m", "start", "demand"): 2, ("m", "stop", "Evicted"): 1})
GAUGES: Gauges = {"llmgw_usage_unflushed": ("help \\ with\nnewline", lambda: 3.0)}


def library(s: Summary) -> bytes:
    return generate_latest(registry(lambda: s, GAUGES, lambda: COUNTS))


def hostile() -> NodeRecord:
    """A node whose words need escaping in the text format: quotes, backslashes, a newline."""
    n = node("n3", fabric='ib-"x"')
    odd = InstallStatus(engine="vllm", version='0.9"\\\nrc', step="downloading", done_bytes=1, total_bytes=None)
    return n.model_copy(update={"report": n.report.model_copy(update={"installs": [odd]})})


READY = set_condition([], ConditionType.Ready, Status.TRUE, Reason.AllShardsReady, "", 0)
R1 = ReplicaRecord(id="r1", model="m", created_at=0, shards_expected=1, conditions=READY, endpoint="http://a:1",
                   assignments=[ShardAssignment(rank=0, node_id="n1", address="a", gpus=[0, 1])])


def cluster(nodes: list[NodeRecord], facts: NodeFactsKept, lines: ReplicaLines) -> Summary:
    return summarize(nodes, [R1], [], {}, now=100.0, models={"m": model("m")}, facts=facts, replica_lines=lines)


def with_load(n: NodeRecord, running: int) -> NodeRecord:
    load = EngineLoad(running=running, waiting=1, kv_cache_usage=0.5, at=1.0)
    shards = [ShardState(replica_id="r1", rank=0, state="ready", load=load)]
    return n.model_copy(update={"report": n.report.model_copy(update={"shards": shards})})


def test_the_scrape_from_kept_samples_is_byte_for_byte_the_librarys() -> None:
    s = known()
    assert Scrape(GAUGES, lambda: COUNTS).text(s) == library(s)
    facts, lines = NodeFactsKept(), ReplicaLines()
    s = cluster([with_load(node("n1", fabric="ib-a"), 3), node("n2", faulty=(1,), lost=True), hostile()],
                facts, lines)
    text = Scrape(GAUGES, lambda: COUNTS).text(s)
    assert text == library(s)
    assert b'version="0.9\\"\\\\\\nrc"' in text and b"llmgw_engine_requests_running{" in text


def test_a_nodes_samples_are_written_again_when_its_record_changes_and_kept_while_it_does_not() -> None:
    facts, lines, scrape = NodeFactsKept(), ReplicaLines(), Scrape(GAUGES, lambda: COUNTS)
    n1, n2 = with_load(node("n1"), 3), node("n2")
    before = scrape.text(cluster([n1, n2], facts, lines))
    kept = scrape.nodes.held["n2"][1]
    changed = with_load(n1.model_copy(update={"lost": True}), 5)  # a new record: lost, its engine's gauge moved
    s = cluster([changed, n2], facts, lines)
    after = scrape.text(s)
    assert after == library(s) and after != before
    assert b'llmgw_gpu_nvlink_peers{node="n1"}' in before and b'llmgw_gpu_nvlink_peers{node="n1"}' not in after
    assert scrape.nodes.held["n2"][1] is kept  # n2's record is the same: its samples were not written again
    scrape.text(cluster([n2], facts, lines))
    assert "n1" not in scrape.nodes.held  # a node gone is forgotten


def test_a_replicas_line_is_kept_per_record_and_made_again_when_its_leading_node_reports() -> None:
    facts, lines = NodeFactsKept(), ReplicaLines()
    n1 = with_load(node("n1"), 3)
    first = cluster([n1], facts, lines).replicas[0]
    assert cluster([n1], facts, lines).replicas[0] is first
    n7 = with_load(n1, 7)
    moved = cluster([n7], facts, lines).replicas[0]
    assert moved is not first and moved.load is not None and moved.load.running == 7
    s = summarize([n7], [R1.model_copy(update={"endpoint": "http://b:2"})], [], {}, now=100.0, replica_lines=lines)
    assert s.replicas[0].endpoint == "http://b:2"  # a new record: a new line


def many(healthy: int) -> list[NodeRecord]:
    troubled = [node("a-lost", lost=True), node("b-faulty", faulty=(2,))]
    troubled[1] = troubled[1].model_copy(update={"conditions": set_condition(
        [], ConditionType.GPUsHealthy, Status.FALSE, Reason.GPUFaulty, "Xid 79", 0)})
    cpu = set_condition([], ConditionType.CPUFeatures, Status.UNKNOWN, Reason.CPUUnknown, "", 0)  # advice only
    return troubled + [node(f"n{i:04d}").model_copy(update={"conditions": cpu}) for i in range(healthy)]


def shown(html: str) -> list[str]:
    return [part.split('"')[0] for part in html.split('data-node="')[1:]]


def test_the_page_shows_every_node_in_trouble_and_the_healthy_ones_a_page_at_a_time() -> None:
    nodes = many(2 * PAGE + 50)
    s = summarize(nodes, [], [], {}, now=1.0)
    rows = Rows()
    first = render_view(s, 1, rows)
    assert shown(first) == ["a-lost", "b-faulty", *[f"n{i:04d}" for i in range(PAGE)]]
    assert f"{PAGE + 50} healthy nodes not shown: page <b class=\"page\">1</b> of 3" in first
    assert 'data-page="2">next</a>' in first and "previous" not in first
    second = render_view(s, 2, rows)
    assert shown(second) == ["a-lost", "b-faulty", *[f"n{i:04d}" for i in range(PAGE, 2 * PAGE)]]
    last = render_view(s, 3, rows)
    assert shown(last) == ["a-lost", "b-faulty", *[f"n{i:04d}" for i in range(2 * PAGE, 2 * PAGE + 50)]]
    assert render_view(s, 99, rows) == last  # past the end: the last page
    small = summarize(many(3), [], [], {}, now=1.0)
    assert len(shown(render_view(small))) == 5 and "not shown" not in render_view(small)


def test_a_nodes_row_is_made_again_when_its_record_changes() -> None:
    facts, rows = NodeFactsKept(), Rows()
    n = node("n1")
    assert 'class="state">live<' in render_view(summarize([n], [], [], {}, now=1.0, facts=facts), 1, rows)
    lost = n.model_copy(update={"lost": True})
    assert 'class="state">lost<' in render_view(summarize([lost], [], [], {}, now=1.0, facts=facts), 1, rows)


def test_api_status_gives_nodes_a_page_at_a_time_and_every_replica() -> None:
    facts, lines, js = NodeFactsKept(), ReplicaLines(), StatusJson()
    s = cluster([with_load(node("n1"), 3), *(node(f"n{i}") for i in range(2, 6))], facts, lines)
    whole = js.data(s)
    assert [n["node"] for n in whole["nodes"]] == ["n1", "n2", "n3", "n4", "n5"]
    assert whole["nodes_not_shown"] == 0 and whole["nodes_from"] == 0
    assert whole == s.model_dump()
    part = js.data(s, 2, 2)
    assert [n["node"] for n in part["nodes"]] == ["n3", "n4"] and part["nodes_not_shown"] == 3
    assert [r["id"] for r in part["replicas"]] == ["r1"]
    s2 = cluster([with_load(node("n1"), 9), *(node(f"n{i}") for i in range(2, 6))], facts, lines)
    assert js.data(s2)["replicas"][0]["load"]["running"] == 9  # the line changed: its JSON was made again


async def test_page_parameters_out_of_range_are_400s_that_say_why(tmp_path: Path) -> None:
    p = plan(tmp_path, [], [])
    async with InProcessServer(p):
        for path in ("/admin/view?page=0", "/admin/view?page=abc", "/admin/view?page=" + "9" * 50,
                     "/api/status?nodes_limit=0", "/api/status?nodes_from=-1", "/api/status?nodes_limit=²"):
            status, text = await call(p, "GET", path)
            assert status == 400 and "must be a whole number" in text, (path, status, text[:200])
        status, text = await call(p, "GET", "/admin/view?page=3")
        assert status == 200 and "no nodes have registered" in text
        status, text = await call(p, "GET", "/api/status?nodes_from=5&nodes_limit=10")
        assert status == 200 and '"nodes_not_shown": 0' in text


@pytest.mark.real  # it runs promtool: a process, which the unit tier refuses
def test_promtool_accepts_the_scrape_written_from_kept_samples() -> None:
    facts, lines = NodeFactsKept(), ReplicaLines()
    s = cluster([with_load(node("n1", fabric="ib-a"), 3), node("n2", lost=True), hostile()], facts, lines)
    for text in (Scrape(GAUGES, lambda: COUNTS).text(known()), Scrape(GAUGES, lambda: COUNTS).text(s)):
        out = subprocess.run([find_promtool(), "check", "metrics"], input=text, capture_output=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr


def replica_ids(html: str) -> list[str]:
    return [part.split('"')[0] for part in html.split('data-replica="')[1:]]


def test_the_page_shows_every_replica_pending_unresponsive_or_failed_and_the_rest_a_page_at_a_time() -> None:
    ready = [R1.model_copy(update={"id": f"r{i:04d}"}) for i in range(PAGE + 20)]
    stopping = R1.model_copy(update={"id": "s-stop", "stop": StopRequest(reason=Reason.ScaledDown)})
    pending = ReplicaRecord(id="p-none", model="m", created_at=0, shards_expected=1)
    s = summarize([node("n1")], [*ready, stopping, pending], [], {}, now=1.0)
    first, second = render_view(s, 1), render_view(s, 2)
    assert replica_ids(first) == ["p-none", *[f"r{i:04d}" for i in range(PAGE)]]
    assert replica_ids(second) == ["p-none", *[f"r{i:04d}" for i in range(PAGE, PAGE + 20)], "s-stop"]
    assert "21 replicas ready, starting or stopping not shown: page" in first
