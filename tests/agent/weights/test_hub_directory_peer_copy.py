"""A node of the fabric copies a hub model's directory from the node that fetched it, over mutual TLS with the
nodes' own certificates, file by file by each file's URL: the hub is asked for nothing."""

from __future__ import annotations

from pathlib import Path

from llmgw.agent.weights import hubdir
from llmgw.agent.weights.fetcher import Fetcher, Ready, Waiting
from llmgw.agent.weights.outcome import Outcome
from llmgw.agent.weights.serve import start_peer_listener
from llmgw.sim.hub import HubHandle
from llmgw.wire.hub import file_url
from llmgw.wire.messages import WeightsPeer, WeightsPlan
from tests.agent.weights.hubkit import CDN, REPO, TOKEN, plan_for
from tests.agent.weights.kit import Pki, fetcher, settled
from tests.harness import await_until, free_port


async def test_a_second_node_copies_the_directory_from_the_first(tmp_path: Path, pki: Pki, hub: HubHandle) -> None:
    hub.repo(REPO).move("main", {"tokenizer/merges+extra=1.txt": b"a b\n"})  # a path that is quoted in its URL
    source, plan = plan_for(hub, token=TOKEN)
    assert "merges%2Bextra%3D1.txt" in file_url(plan.base_url, "tokenizer/merges+extra=1.txt")
    copier = fetcher(tmp_path / "node01", tls=lambda: pki.client("node01"), redirects=CDN)
    got = await copied_from_node02(tmp_path, pki, hub, copier, source, plan, reset=True)
    assert isinstance(got, Ready) and got.path == hubdir.dir_for(tmp_path / "node01", source), got
    assert hubdir.held_sources([tmp_path / "node01"]) == [source]
    for f in plan.files:
        assert (got.path / f.path).read_bytes() == (tmp_path / "node02" / got.path.relative_to(
            tmp_path / "node01") / f.path).read_bytes(), f.path
    assert sum(hub.counters.requests.values()) == 0, "the hub was not asked for a byte"


async def test_a_node_told_to_wait_copies_once_the_first_holds_the_directory(tmp_path: Path, pki: Pki,
                                                                              hub: HubHandle) -> None:
    """One download per fabric: node01 waits while node02 fetches from the hub, then, told node02 holds the
    directory, copies every file from it; the hub serves the model once."""
    source, plan = plan_for(hub)
    copier = fetcher(tmp_path / "node01", tls=lambda: pki.client("node01"), redirects=CDN)
    wait = plan.model_copy(update={"origin": False, "wait_for": "node02"})

    def words() -> str:
        o = copier.ensure(source, wait)
        assert isinstance(o, Waiting), o
        return o.message

    await await_until(lambda: "waiting for node02" in words(), 10, "node01 waiting for node02")
    assert [s.state for s in copier.statuses()] == ["waiting"]
    got = await copied_from_node02(tmp_path, pki, hub, copier, source, plan)
    assert isinstance(got, Ready), got
    assert hub.counters.bytes_sent.total() == sum(f.size for f in plan.files), "the hub served the model once"


async def copied_from_node02(tmp_path: Path, pki: Pki, hub: HubHandle, copier: Fetcher, source: str,
                             plan: WeightsPlan, reset: bool = False) -> Outcome:
    """node02 fetches the directory from the hub and serves it to its fabric; `copier` (node01's), told node02
    holds it, copies it from there. `reset`: the hub's counters zeroed once node02 has it."""
    first = fetcher(tmp_path / "node02", redirects=CDN)
    assert isinstance(await settled(first, source, plan), Ready)
    await first.close()
    if reset:
        hub.counters.reset()
    port = free_port()
    listener = await start_peer_listener(tmp_path / "node02", "127.0.0.1", port, pki.server("node02"))
    try:
        copy = plan.model_copy(update={"origin": False, "peers": [
            WeightsPeer(node_id="node02", address="127.0.0.1", port=port)]})
        got = await settled(copier, source, copy)
        await copier.close()
    finally:
        await listener.cleanup()
    return got
