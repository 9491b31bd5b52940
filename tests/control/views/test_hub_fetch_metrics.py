"""/metrics carries a model directory's files beside its bytes, per live node and transfer state, and a gauge for
every hub model the control plane has not resolved, with the reason: all read from the one Summary."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from llmgw.control.views.exposition import render
from llmgw.control.views.metrics import registry
from llmgw.control.views.summary import Summary, summarize
from llmgw.core.reasons import Reason
from llmgw.records.state import NodeRecord
from llmgw.wire.hub import HubFile, HubState, Resolution
from llmgw.wire.messages import FetchStatus
from tests.clusters import model, node

C1 = "f" * 40
PINNED = f"hf://org/qwen@{C1}"
URL = "https://models.example/m.gguf"
RES = Resolution(repo="org/qwen", revision="main", commit=C1, files=(HubFile(path="a.safetensors", size=10),))
MODELS = {"q": model("q", source="hf://org/qwen@main"), "g": model("g", source="hf://org/gated"),
          "u": model("u", source=URL)}
HUB = {"q": HubState(source="hf://org/qwen@main", resolution=RES),
       "g": HubState(source="hf://org/gated", reason=Reason.HubAccessDenied, message="gated, no token")}

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def fetching(n: NodeRecord, *fs: FetchStatus) -> NodeRecord:
    return n.model_copy(update={"report": n.report.model_copy(update={"fetches": list(fs)})})


def samples(s: Summary) -> Samples:
    text = generate_latest(registry(lambda: s)).decode()
    assert render(registry(lambda: s)).decode() == text  # llmgw's own writer says the same
    return {(x.name, frozenset(x.labels.items())): x.value
            for fam in text_string_to_metric_families(text) for x in fam.samples}


def summary() -> Summary:
    hub_fetch = FetchStatus(source=PINNED, state="fetching", via="n2", done_bytes=4, total_bytes=10, done_files=2,
                            total_files=7)
    url_fetch = FetchStatus(source=URL, state="fetching", via="origin", done_bytes=5, total_bytes=9)
    failed = FetchStatus(source=PINNED, state="failed", reason="DiskFull", done_files=1, total_files=7)
    nodes = [fetching(node("n1"), hub_fetch, url_fetch), fetching(node("n3"), failed),
             fetching(node("n4", lost=True), hub_fetch)]
    return summarize(nodes, [], [], {}, now=1.0, models=MODELS, hub=HUB)


def test_a_model_directorys_files_are_exported_beside_its_bytes() -> None:
    out = samples(summary())
    assert out[("llmgw_weights_fetch_files", frozenset({("node", "n1"), ("source", PINNED),
                                                        ("state", "fetching")}))] == 2
    assert out[("llmgw_weights_fetch_total_files", frozenset({("node", "n1"), ("source", PINNED)}))] == 7
    assert out[("llmgw_weights_fetch_files", frozenset({("node", "n3"), ("source", PINNED),
                                                        ("state", "failed")}))] == 1
    assert out[("llmgw_weights_fetch_bytes", frozenset({("node", "n1"), ("source", PINNED), ("via", "n2"),
                                                        ("state", "fetching")}))] == 4
    files = {labels for name, labels in out if name.startswith("llmgw_weights_fetch_") and "files" in name}
    assert not any(("source", URL) in ls for ls in files)  # one file: counted in bytes only
    assert not any(("node", "n4") in ls for ls in files)  # a lost node's last report is no transfer under way


def test_every_unresolved_hub_model_is_a_series_with_its_reason() -> None:
    out = samples(summary())
    unresolved = {labels: v for (name, labels), v in out.items() if name == "llmgw_hub_model_unresolved"}
    assert unresolved == {frozenset({("model", "g"), ("reason", "HubAccessDenied")}): 1}
