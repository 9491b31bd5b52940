"""What an agent reports of a hub model: one fetch for the directory while its files arrive (bytes and files
summed), then the pinned source in `weights`, never its files one by one."""

from __future__ import annotations

from pathlib import Path

from llmgw.agent.agent import Agent
from llmgw.agent.weights import hubdir, local
from llmgw.agent.weights.fetcher import Ready
from llmgw.core.clock import FakeClock
from llmgw.sim.hub import HubHandle
from tests.agent.test_agent_report import config
from tests.agent.weights.hubkit import hub_fetcher, plan_for
from tests.agent.weights.kit import settled
from tests.harness import await_until


async def test_the_report_carries_one_fetch_then_the_pinned_source(tmp_path: Path, hub: HubHandle) -> None:
    cfg = config(tmp_path, "h100x8-ib2", []).model_copy(update={"redirects_allowed": ["127.0.0.1"]})
    a = Agent(cfg, FakeClock())
    await a.start()
    try:
        hub.slow(300_000)
        source, plan = plan_for(hub)
        a.fetcher.ensure(source, plan)
        await await_until(lambda: any(s.state == "fetching" for s in a.fetcher.statuses()), 20, "under way")
        r = await a.report()
        assert [(s.source, s.total_files, s.total_bytes) for s in r.fetches] == [
            (source, len(plan.files), sum(f.size for f in plan.files))], r.fetches
        assert "(" in r.fetches[0].words() and f"of {len(plan.files)} files)" in r.fetches[0].words()
        assert source not in r.weights
        hub.slow(0)
        got = await settled(a.fetcher, source, plan)
        assert isinstance(got, Ready)
        r = await a.report()
        assert r.fetches == [] and r.weights == [source], r.weights
    finally:
        await a.close()



async def test_a_directory_held_from_before_is_ready_at_once_and_no_fetch(tmp_path: Path, hub: HubHandle) -> None:
    """An agent started again finds the directory whole: ready without a request, and nothing reported as a fetch."""
    source, plan = plan_for(hub)
    first = hub_fetcher(tmp_path)
    assert isinstance(await settled(first, source, plan), Ready)
    await first.close()
    hub.counters.reset()
    again = hub_fetcher(tmp_path)
    got = again.ensure(source, plan)
    assert isinstance(got, Ready) and got.path == hubdir.dir_for(tmp_path, source), got
    assert again.statuses() == [] and sum(hub.counters.requests.values()) == 0
    await again.close()


async def test_an_operators_own_hub_cache_is_still_reported_by_its_paths(tmp_path: Path, hub: HubHandle) -> None:
    """weights_dirs may hold a Hugging Face cache of the operator's own (`hub/models--org--name/...`): its files
    are still held weights, by path; only the directories this node laid out are reported by their source."""
    own = tmp_path / "node"
    source, plan = plan_for(hub)
    f = hub_fetcher(own)
    assert isinstance(await settled(f, source, plan), Ready)
    await f.close()
    theirs = tmp_path / "filer" / "hub" / "models--org--m" / "snapshots" / ("b" * 40) / "config.json"
    theirs.parent.mkdir(parents=True)
    theirs.write_text("{}")
    assert local.visible([tmp_path / "filer", own]) == [str(theirs)]
    assert hubdir.held_sources([tmp_path / "filer", own]) == [source]
