"""Per model, where its weights stand: what a hub source resolved to (or the reason and words why not), and on each
live node held whole, arriving (bytes and files), waited for or failed, counted only at the resolved commit."""

from __future__ import annotations

import pytest

from llmgw.api.model_weights import ModelWeights, model_weights, node_weights_words, weights_lines, weights_trouble
from llmgw.control.views.summary import summarize
from llmgw.core.reasons import Reason
from llmgw.records.state import NodeRecord, ReplicaRecord, ShardAssignment
from llmgw.wire.hub import HubFile, HubState, Resolution
from llmgw.wire.messages import FetchStatus
from tests.clusters import model, node

C1 = "a" * 40
C2 = "b" * 40
SRC = "hf://org/qwen@main"
PINNED = f"hf://org/qwen@{C1}"
FILES = (*(HubFile(path=f"model-{i}.safetensors", size=2_000_000_000) for i in range(7)),
         HubFile(path="config.json", size=1_000))
RES = Resolution(repo="org/qwen", revision="main", commit=C1, files=FILES)
RESOLVED = {"q": HubState(source=SRC, resolution=RES, since=5.0)}
CATALOG = {"q": model("q", source=SRC)}


def with_fetches(n: NodeRecord, *fetches: FetchStatus) -> NodeRecord:
    return n.model_copy(update={"report": n.report.model_copy(update={"fetches": list(fetches)})})


def copying(done: int, files: int, source: str = PINNED) -> FetchStatus:
    return FetchStatus(source=source, state="fetching", via="node02", done_bytes=done, total_bytes=RES.total_bytes,
                       done_files=files, total_files=len(FILES), rate_bps=80e6, eta_s=40.0,
                       message="copying from node02")


def one(models: dict[str, ModelWeights] | list[ModelWeights]) -> ModelWeights:
    ws = list(models.values()) if isinstance(models, dict) else models
    assert len(ws) == 1
    return ws[0]


def test_a_resolved_model_shows_its_commit_size_files_and_each_node_in_its_own_words() -> None:
    nodes = [node("node01", weights=(PINNED,)), with_fetches(node("node03"), copying(3_100_000_000, 2))]
    w = one(model_weights(CATALOG, nodes, [], RESOLVED))
    assert (w.resolved, w.commit, w.pinned, w.total_files, w.held) == (True, C1, PINNED, 8, 1)
    assert w.total_bytes == 14_000_001_000
    held, fetching = w.nodes
    assert (held.node, held.state, held.done_bytes, held.done_files) == ("node01", "held", w.total_bytes, 8)
    assert (fetching.state, fetching.via, fetching.done_files, fetching.total_files) == ("fetching", "node02", 2, 8)
    lines = weights_lines(w)
    assert lines[0] == f"{SRC} at commit {C1[:12]}: 14.0 GB in 8 files"
    assert lines[1] == "node01: held whole"
    assert lines[2] == ("3.1 GB of 14.0 GB, 2 of 8 files on node03 (copying from node02 at 80 MB/s, "
                        "about 40 s left)")
    assert weights_trouble(w) == ""  # on its way, nothing failed: nothing to explain


def test_a_directory_of_another_commit_is_neither_held_nor_progress() -> None:
    other = f"hf://org/qwen@{C2}"
    nodes = [node("node01", weights=(other,)), with_fetches(node("node02"), copying(5, 1, source=other))]
    w = one(model_weights(CATALOG, nodes, [], RESOLVED))
    assert w.held == 0 and w.nodes == []
    assert weights_lines(w)[-1] == "no live node holds or fetches it"


def test_a_node_with_a_shard_that_neither_holds_nor_fetches_says_so() -> None:
    rep = ReplicaRecord(id="r1", model="q", created_at=0, shards_expected=1,
                        assignments=[ShardAssignment(rank=0, node_id="node05", address="a")])
    w = one(model_weights(CATALOG, [node("node05")], [rep], RESOLVED))
    (n,) = w.nodes
    assert (n.state, n.reason) == ("absent", Reason.WeightsFetching)
    assert PINNED in n.message


def test_a_lost_node_counts_for_nothing() -> None:
    w = one(model_weights(CATALOG, [node("node01", weights=(PINNED,), lost=True)], [], RESOLVED))
    assert w.held == 0 and w.nodes == []


@pytest.mark.parametrize("reason", [Reason.HubResolving, Reason.HubUnreachable, Reason.HubAccessDenied,
                                    Reason.HubNotFound, Reason.RevisionGone, Reason.NoWeightsFiles])
def test_every_reason_a_source_is_not_resolved_is_shown_with_its_words(reason: Reason) -> None:
    words = f"the hub's own words for {reason.value}"
    state = {"q": HubState(source=SRC, reason=reason, message=words, since=9.0)}
    w = one(model_weights(CATALOG, [node("node01", weights=(PINNED,))], [], state))
    assert (w.resolved, w.reason, w.message, w.since, w.pinned, w.held) == (False, reason, words, 9.0, "", 0)
    assert weights_lines(w) == [f"{SRC}: {reason.value}: {words}"]
    assert weights_trouble(w) == f"{SRC}: {reason.value}: {words}"


def test_a_hub_model_the_control_plane_has_no_state_for_is_resolving_never_resolved() -> None:
    w = one(model_weights(CATALOG, [], [], {}))
    assert (w.resolved, w.reason) == (False, Reason.HubResolving)
    assert w.message


def test_a_catalog_commit_counts_nodes_holding_it_before_the_hub_answers() -> None:
    pinned_catalog = {"q": model("q", source=PINNED)}
    state = {"q": HubState(source=PINNED, reason=Reason.HubUnreachable, message="connection refused")}
    w = one(model_weights(pinned_catalog, [node("node01", weights=(PINNED,))], [], state))
    assert (w.resolved, w.reason, w.held, w.nodes[0].state) == (False, Reason.HubUnreachable, 1, "held")


def test_failed_and_waiting_nodes_carry_the_nodes_reason_and_words() -> None:
    failed = FetchStatus(source=PINNED, state="failed", reason="DigestMismatch",
                         message="model-3.safetensors: sha256 is 00ff…, the hub says 1234…; removed")
    waiting = FetchStatus(source=PINNED, state="waiting", message="waiting for node01 to fetch it")
    nodes = [with_fetches(node("node02"), failed), with_fetches(node("node03"), waiting)]
    w = one(model_weights(CATALOG, nodes, [], RESOLVED))
    assert [node_weights_words(n) for n in w.nodes] == [
        "node02: failed (DigestMismatch): model-3.safetensors: sha256 is 00ff…, the hub says 1234…; removed",
        "node03: waiting: waiting for node01 to fetch it"]
    assert weights_trouble(w) == ("weights node02: failed (DigestMismatch): model-3.safetensors: sha256 is 00ff…, "
                                  "the hub says 1234…; removed")


def test_a_url_source_has_the_same_shape_with_one_file() -> None:
    url = "https://models.internal/q4.gguf"
    spec = model("u", source=url).model_copy(update={"size": 4_000_000_000})
    fetch = FetchStatus(source=url, state="fetching", via="origin", done_bytes=1_000_000_000,
                        total_bytes=4_000_000_000, message="fetching from the origin")
    w = one(model_weights({"u": spec, "local": model("local")}, [with_fetches(node("n1"), fetch)], [], {}))
    assert (w.kind, w.resolved, w.pinned, w.total_files) == ("url", True, url, 1)
    assert weights_lines(w) == [f"{url}: 4.0 GB", "1.0 GB of 4.0 GB on n1 (fetching from the origin)"]


def test_two_models_of_one_source_each_count_the_nodes_that_hold_it() -> None:
    catalog = {"q": model("q", source=SRC), "q-long": model("q-long", source=SRC)}
    both = {name: RESOLVED["q"] for name in catalog}
    ws = model_weights(catalog, [node("node01", weights=(PINNED,))], [], both)
    assert [(w.model, w.held) for w in ws] == [("q", 1), ("q-long", 1)]


def test_a_resolved_source_with_a_reason_now_says_it_and_leads_the_models_why_not() -> None:
    gone = {"q": HubState(source=SRC, resolution=RES, reason=Reason.RevisionGone,
                          message=f"{C1} is no longer on the hub; resolving main again")}
    w = one(model_weights(CATALOG, [node("node01", weights=(PINNED,))], [], gone))
    assert w.resolved and w.held == 1
    assert weights_lines(w)[0].endswith(f"; RevisionGone: {C1} is no longer on the hub; resolving main again")
    assert weights_trouble(w) == weights_lines(w)[0]


def test_ctl_status_gives_the_weights_reason_first_among_a_models_why_not() -> None:
    denied = {"q": HubState(source=SRC, reason=Reason.HubAccessDenied, message="gated, and no token")}
    line = next(m for m in summarize([], [], [], {}, now=1.0, models=CATALOG, hub=denied).models if m.model == "q")
    assert line.why == [f"{SRC}: HubAccessDenied: gated, and no token", "no replica yet"]
    fine = next(m for m in summarize([], [], [], {}, now=1.0, models=CATALOG, hub=RESOLVED).models)
    assert fine.why == ["no replica yet"]


def test_a_fabric_holds_a_hub_model_through_its_resolved_commit_only() -> None:
    held = [node("node01", fabric="ib-a", weights=(PINNED,)), node("node02", fabric="ib-b",
                                                                    weights=(f"hf://org/qwen@{C2}",))]
    s = summarize(held, [], [], {}, now=1.0, models=CATALOG, hub=RESOLVED, sources={SRC: ["q"]})
    assert {f.fabric: f.models_held for f in s.fabrics} == {"ib-a": ["q"], "ib-b": []}
