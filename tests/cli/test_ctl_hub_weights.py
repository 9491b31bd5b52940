"""ctl shows where a hub model's weights stand: `ctl models` per model (bytes and files per node, or the resolve
problem in the resolver's words), `ctl explain` why it is not ready, `ctl nodes` each fetch with its files; a node's
words reach the terminal as harmless text."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from llmgw.api.model_weights import model_weights
from llmgw.api.views import node_row
from llmgw.cli.ctl import _model_table, _node_table
from llmgw.core.reasons import Reason
from llmgw.records.state import NodeRecord
from llmgw.wire.hub import HubFile, HubState, Resolution
from llmgw.wire.messages import FetchStatus
from tests.cli.test_ctl_hostile_text import ctl
from tests.clusters import model, node
from tests.harness import InProcessServer, plan

C1 = "d" * 40
SRC = "hf://org/qwen@main"
PINNED = f"hf://org/qwen@{C1}"
RES = Resolution(repo="org/qwen", revision="main", commit=C1,
                 files=tuple(HubFile(path=f"m-{i}.safetensors", size=2_285_714_286) for i in range(7)))


def text(t: Table) -> str:
    c = Console(width=400, record=True, color_system=None)
    c.print(t)
    return c.export_text()


def fetching(message: str = "copying from node02") -> FetchStatus:
    return FetchStatus(source=PINNED, state="fetching", via="node02", done_bytes=3_100_000_000,
                       total_bytes=RES.total_bytes, done_files=2, total_files=7, eta_s=40.0, message=message)


def copying_node(message: str = "copying from node02") -> NodeRecord:
    n = node("node01")
    return n.model_copy(update={"report": n.report.model_copy(update={"fetches": [fetching(message)]})})


def rows(hub: dict[str, HubState], nodes: list[NodeRecord]) -> list[dict[str, object]]:
    (w,) = model_weights({"q": model("q", source=SRC)}, nodes, [], hub)
    return [{"name": "q", "engine": "sim", "min": 1, "max": 1, "on_demand": False, "gpus_per_shard": 4, "nodes": 1,
             "replicas": 1, "ready": 0, "weights": w.model_dump()}]


def test_ctl_models_shows_bytes_and_files_per_node() -> None:
    out = text(_model_table(rows({"q": HubState(source=SRC, resolution=RES)}, [copying_node()])))
    assert f"{SRC} at commit {C1[:12]}: 16.0 GB in 7 files" in out
    assert "3.1 GB of 16.0 GB, 2 of 7 files on node01 (copying from node02, about 40 s left)" in out


def test_ctl_models_shows_the_resolve_problem_in_the_resolvers_words() -> None:
    words = "org/qwen is gated: the hub answered 401 and no token is configured"
    hub = {"q": HubState(source=SRC, reason=Reason.HubAccessDenied, message=words)}
    out = text(_model_table(rows(hub, [copying_node()])))
    assert f"{SRC}: HubAccessDenied: {words}" in out
    assert "node01" not in out  # no progress is shown for a commit nobody resolved


def test_a_nodes_words_in_a_fetch_reach_the_terminal_as_text() -> None:
    hostile = "[link=file:///etc/passwd]x[/link] \x1b[2J\u202eevil"
    out = text(_model_table(rows({"q": HubState(source=SRC, resolution=RES)}, [copying_node(hostile)])))
    assert "\x1b" not in out and "\u202e" not in out
    assert "[link=file:///etc/passwd]x[/link]" in out


def test_ctl_nodes_prints_a_fetch_with_its_files() -> None:
    out = text(_node_table([node_row(copying_node()).model_dump()]))
    assert f"weights {PINNED}: copying from node02: 3.1 GB of 16.0 GB (2 of 7 files), about 40 s left" in out


async def test_ctl_models_and_explain_say_a_hub_model_is_not_resolved(tmp_path: Path) -> None:
    q = {"name": "q", "source": SRC, "engine": "sim", "profile": {"gpus_per_shard": 1}, "scaling": {"min": 0, "max": 1}}
    p = plan(tmp_path, [], [q])
    async with InProcessServer(p):
        for args in (("models",), ("explain", "q")):
            out = await ctl(p, *args)
            assert out.returncode == 0, out.stdout + out.stderr
            said = out.stdout.decode()
            assert f"{SRC}: Hub" in said, said  # HubResolving until the owner resolving hub sources answers
            assert "at commit" not in said
