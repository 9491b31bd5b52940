"""A hub model fetched by a node from the stand-in hub (real HTTP on loopback, real files): every file once, laid
out as the repository is, named only when whole, resumed after a cut or a killed agent, reported as one fetch and
then as its pinned source; the token only to the hub's own host; a file removed for room unmakes the directory."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from llmgw.agent.weights import hubdir, local
from llmgw.agent.weights.fetcher import Failed, Ready
from llmgw.core.errors import WeightsRefused
from llmgw.sim.hub import HubHandle
from llmgw.wire.hub import file_url
from tests.agent.installs.release import Release
from tests.agent.weights.hubkit import REPO, TOKEN, hub_fetcher, plan_for
from tests.agent.weights.kit import settled
from tests.harness import await_until

SHARD = "model-00002-of-00003.safetensors"


async def test_a_hub_model_arrives_as_one_directory_laid_out_as_the_repository(tmp_path: Path,
                                                                             hub: HubHandle) -> None:
    d = tmp_path / "node01"
    source, plan = plan_for(hub)
    f = hub_fetcher(d)
    got = await settled(f, source, plan)
    assert isinstance(got, Ready), got
    commit = source.rsplit("@", 1)[1]
    assert got.path == d / "hub" / "acme--tiny-llama" / commit
    blobs = hub.repo(REPO).commits[commit].files
    for path, blob in blobs.items():
        assert (got.path / path).read_bytes() == b"".join(blob.chunks(0, blob.size)), path
        assert (got.path / path).is_symlink(), "a link to the fetched file: one copy on disk"
        assert hub.counters.bytes_sent[path] == blob.size, f"{path} fetched once, whole"
    manifest = json.loads((got.path / hubdir.MANIFEST).read_text())
    assert manifest["source"] == source and len(manifest["files"]) == len(blobs)
    assert local.visible([d]) == [], "the files are not reported one by one"
    assert hubdir.held_sources([d]) == [source]
    assert f.statuses() == []
    await f.close()


async def test_progress_is_one_fetch_summed_over_the_files(tmp_path: Path, hub: HubHandle) -> None:
    hub.slow(400_000)
    source, plan = plan_for(hub)
    f = hub_fetcher(tmp_path)
    f.ensure(source, plan)
    st = await await_until(lambda: [s for s in f.statuses() if s.state == "fetching" and s.done_bytes], 20,
                           "the directory under way")
    assert len(f.statuses()) == 1 and st[0].source == source, f.statuses()
    assert st[0].total_bytes == sum(x.size for x in plan.files) and st[0].total_files == len(plan.files)
    assert st[0].via == "origin" and st[0].message == f"fetching from the hub at 127.0.0.1:{hub.ports[0]}"
    assert not hubdir.dir_for(tmp_path, source).exists(), "nothing under the final name while files arrive"
    hub.slow(0)
    assert isinstance(await settled(f, source, plan), Ready)
    await f.close()


async def test_a_killed_fetch_leaves_nothing_under_the_final_name_and_the_next_resumes(tmp_path: Path,
                                                                                     hub: HubHandle) -> None:
    hub.slow(300_000)
    source, plan = plan_for(hub)
    f = hub_fetcher(tmp_path)
    f.ensure(source, plan)
    target = local.target_for(tmp_path, file_url(plan.base_url, SHARD))
    part = target.with_name(target.name + local.PART)
    await await_until(lambda: part.exists() and part.stat().st_size > 50_000, 20, "a shard part way")
    await f.close()  # the agent killed
    final = hubdir.dir_for(tmp_path, source)
    assert not final.exists() and not target.exists(), "nothing half-written under a final name"
    kept = part.stat().st_size
    # the killed agent's answer, paced, ends on the hub's side only when its next chunk finds the reader gone
    await await_until(lambda: hub.counters.sending == 0, 10, "the hub done with the killed agent's request")
    hub.slow(0)
    hub.counters.reset()
    again = hub_fetcher(tmp_path)
    got = await settled(again, source, plan)
    assert isinstance(got, Ready) and got.path == final, got
    assert hub.counters.bytes_sent[SHARD] == 300_000 - kept, "the shard resumed where the killed agent stopped"
    assert not [p for p in final.parent.iterdir() if p.name != final.name], "no temporary directory left behind"
    await again.close()


async def test_a_truncated_shard_is_resumed_from_its_part(tmp_path: Path, hub: HubHandle) -> None:
    hub.repo(REPO).truncate(SHARD, 120_000)
    source, plan = plan_for(hub)
    f = hub_fetcher(tmp_path)
    f.ensure(source, plan)
    st = await await_until(lambda: [s for s in f.statuses() if "trying again" in s.message], 20, "a retry")
    assert SHARD in st[0].message and "the hub at 127.0.0.1" in st[0].message, st
    assert not hubdir.dir_for(tmp_path, source).exists()
    hub.repo(REPO).heal()
    got = await settled(f, source, plan)
    assert isinstance(got, Ready), got
    assert hub.counters.bytes_sent[SHARD] == 300_000, "nothing sent twice"
    await f.close()


async def test_the_token_goes_only_to_the_hubs_own_host(tmp_path: Path, gated_hub: HubHandle,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    source, plan = plan_for(gated_hub, token=TOKEN)
    f = hub_fetcher(tmp_path)
    got = await settled(f, source, plan)
    assert isinstance(got, Ready), got
    sites = {site for _, site, _ in gated_hub.counters.authorized}
    assert sites == {"hub"}, "the CDN the hub redirects to never sees the token"
    assert gated_hub.counters.bytes_sent[SHARD] == 300_000, "the shard came through the CDN"
    assert TOKEN not in caplog.text and TOKEN not in repr(f.directories.dirs[source])
    await f.close()


async def test_a_file_removed_for_room_unmakes_the_directory_and_is_fetched_again(tmp_path: Path,
                                                                                 hub: HubHandle) -> None:
    source, plan = plan_for(hub)
    f = hub_fetcher(tmp_path)
    got = await settled(f, source, plan)
    assert isinstance(got, Ready)
    in_use = hubdir.targets(tmp_path, plan)
    with pytest.raises(WeightsRefused, match="in use"):  # a shard runs from it: none of its files goes
        local.make_room(tmp_path, 0, 500_000, in_use, network=False)
    assert hubdir.held_sources([tmp_path]) == [source]
    removed = local.make_room(tmp_path, 0, 500_000, set(), network=False)
    assert removed and hubdir.held_sources([tmp_path]) == [], "a directory with a file gone is not held"
    assert hubdir.read_dir(got.path) is None
    gone = [x for x in plan.files if local.read_held(hubdir.target(tmp_path, plan.base_url, x).parent) is None]
    hub.counters.reset()
    again = await settled(f, source, plan)
    assert isinstance(again, Ready) and hubdir.held_sources([tmp_path]) == [source]
    assert sum(hub.counters.bytes_sent.values()) == sum(x.size for x in gone), "only what was removed came again"
    await f.close()


async def test_room_for_a_directory_is_never_made_from_its_own_files(tmp_path: Path, hub: HubHandle,
                                                                     origin: Release) -> None:
    """Half a directory held (used longest ago) and a newer plain file: the missing shard's room comes from the
    plain file, not from the directory's own files (which would only be fetched again)."""
    hub.repo(REPO).corrupt(SHARD)
    source, plan = plan_for(hub)
    f = hub_fetcher(tmp_path, budget=1_010_000)
    first = await settled(f, source, plan)
    assert isinstance(first, Failed) and first.reason == "DigestMismatch", first
    f.keep(set())
    for t in hubdir.targets(tmp_path, plan):
        if t.exists():
            os.utime(t.parent / local.SOURCE, (1, 1))
    origin.files["other.gguf"] = os.urandom(400_000)
    other = await settled(f, origin.url("other.gguf"))
    assert isinstance(other, Ready), other
    hub.repo(REPO).heal()
    hub.counters.reset()
    got = await settled(f, source, plan)
    assert isinstance(got, Ready), got
    assert not other.path.exists(), "the plain file made the room"
    assert dict(hub.counters.bytes_sent) == {SHARD: 300_000}, hub.counters.bytes_sent
    await f.close()
