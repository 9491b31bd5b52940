"""The dashboard shows each fetched model's weights: the commit a hub source resolved to, or the resolver's reason
and words; and per node held, arriving (a bar, bytes and files), waited for or failed, every word escaped."""

from __future__ import annotations

import re

from llmgw.control.views.dashboard import render_view
from llmgw.control.views.summary import summarize
from llmgw.core.reasons import Reason
from llmgw.records.state import NodeRecord
from llmgw.wire.hub import HubFile, HubState, Resolution
from llmgw.wire.messages import FetchStatus
from tests.clusters import model, node

C1 = "e" * 40
SRC = "hf://org/qwen@main"
PINNED = f"hf://org/qwen@{C1}"
RES = Resolution(repo="org/qwen", revision="main", commit=C1,
                 files=(HubFile(path="a.safetensors", size=3_000_000_000), HubFile(path="b.safetensors",
                                                                                   size=1_000_000_000)))
MODELS = {"q": model("q", source=SRC), "local": model("local")}


def fetching(n: NodeRecord, f: FetchStatus) -> NodeRecord:
    return n.model_copy(update={"report": n.report.model_copy(update={"fetches": [f]})})


def row(html: str, model: str) -> str:
    m = re.search(rf'<tr class="[a-z]+" data-model="{model}">.*?</tr>', html.split("<h2>Weights</h2>")[1])
    assert m is not None, html
    return m.group(0)


def test_a_resolved_model_shows_its_commit_and_each_nodes_progress() -> None:
    f = FetchStatus(source=PINNED, state="fetching", via="node01", done_bytes=1_000_000_000,
                    total_bytes=RES.total_bytes, done_files=1, total_files=2, message="copying from node01 <b>")
    nodes = [node("node01", weights=(PINNED,)), fetching(node("node02"), f)]
    html = render_view(summarize(nodes, [], [], {}, now=1.0, models=MODELS,
                                 hub={"q": HubState(source=SRC, resolution=RES)}))
    r = row(html, "q")
    assert r.startswith('<tr class="resolved"')
    assert f"{SRC} at commit {C1[:12]}: 4.0 GB in 2 files" in r
    assert '<li class="held" data-node="node01">' in r and "node01: held whole" in r
    assert 'aria-label="25%"' in r and 'width="25.00"' in r  # a bar, by bytes
    assert "1.0 GB of 4.0 GB, 1 of 2 files on node02 (copying from node01 &lt;b&gt;)" in r
    assert 'data-model="local"' not in html.split("<h2>Weights</h2>")[1].split("</section>")[0]


def test_an_unresolved_model_shows_the_reason_and_words_and_no_progress() -> None:
    words = "the hub did not answer: connection refused <script>"
    hub = {"q": HubState(source=SRC, reason=Reason.HubUnreachable, message=words)}
    html = render_view(summarize([node("node01", weights=(PINNED,))], [], [], {}, now=1.0, models=MODELS, hub=hub))
    r = row(html, "q")
    assert r.startswith('<tr class="unresolved"')
    assert f"{SRC}: HubUnreachable: the hub did not answer: connection refused &lt;script&gt;" in r
    assert "<li" not in r and '<td class="n held">0</td>' in r
    assert "<script>" not in html


def test_a_bar_never_runs_past_its_end_whatever_a_node_claims() -> None:
    f = FetchStatus(source=PINNED, state="fetching", done_bytes=9_000_000_000, total_bytes=RES.total_bytes)
    html = render_view(summarize([fetching(node("node02"), f)], [], [], {}, now=1.0, models=MODELS,
                                 hub={"q": HubState(source=SRC, resolution=RES)}))
    assert 'width="100.00"' in row(html, "q")
