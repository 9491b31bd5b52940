"""Each way a hub model's directory can fail to arrive, against the stand-in hub: a reason code and the node's own
words, nothing under the directory's final name, and (where the fault passes) a retry that gets it whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmgw.agent.weights import hubdir
from llmgw.agent.weights.fetcher import Failed, Fetcher, Ready, Waiting
from llmgw.sim.hub import HubHandle
from llmgw.wire.messages import WeightsPlan
from tests.agent.weights.hubkit import REPO, hub_fetcher, plan_for
from tests.agent.weights.kit import settled
from tests.harness import await_until
from tests.reliability.test_disk_full import fill, small_disk

SHARD = "model-00001-of-00003.safetensors"


async def _fails(d: Path, source: str, plan: WeightsPlan, reason: str) -> Failed:
    f = hub_fetcher(d)
    got = await settled(f, source, plan)
    assert isinstance(got, Failed) and got.reason == reason, got
    st = f.statuses()
    assert [(s.source, s.state, s.reason) for s in st] == [(source, "failed", reason)], st
    assert not hubdir.dir_for(d, source).exists(), "nothing under the final name"
    await f.close()
    return got


async def _retrying(f: Fetcher, source: str, plan: WeightsPlan) -> Waiting:
    def said() -> Waiting | None:
        o = f.ensure(source, plan)
        return o if isinstance(o, Waiting) and "trying again" in o.message else None

    got: Waiting = await await_until(said, 20, "a file waiting to be tried again")
    return got


async def test_a_gated_repository_without_a_token_is_access_denied(tmp_path: Path, gated_hub: HubHandle) -> None:
    source, plan = plan_for(gated_hub)
    got = await _fails(tmp_path, source, plan, "HubAccessDenied")
    assert "gated or private" in got.message and "hub token is not set" in got.message, got


async def test_a_token_the_hub_refuses_is_access_denied(tmp_path: Path, gated_hub: HubHandle) -> None:
    source, plan = plan_for(gated_hub, token="hf_not_one_the_hub_knows")
    got = await _fails(tmp_path, source, plan, "HubAccessDenied")
    assert "hub token was refused" in got.message and "hf_not_one" not in got.message, got


async def test_a_commit_the_hub_has_forgotten_is_revision_gone(tmp_path: Path, hub: HubHandle) -> None:
    source, plan = plan_for(hub)
    commit = source.rsplit("@", 1)[1]
    hub.repo(REPO).forget(commit)
    got = await _fails(tmp_path, source, plan, "RevisionGone")
    assert f"no longer has commit {commit}" in got.message, got


async def test_an_answer_from_another_commit_is_revision_gone(tmp_path: Path, hub: HubHandle) -> None:
    """The branch moved between the resolve and the fetch, and the files are asked for by the branch's name (as a
    mirror that does not pin would serve them): the hub's X-Repo-Commit names the new commit, not a byte is kept."""
    source, plan = plan_for(hub, revision="main")
    old = source.rsplit("@", 1)[1]
    new = hub.repo(REPO).move("main", {"config.json": b'{"model_type": "llama", "moved": true}'})
    got = await _fails(tmp_path, source, plan, "RevisionGone")
    assert f"from commit {new}, not {old}" in got.message, got


async def test_a_corrupted_shard_is_a_digest_mismatch_naming_the_file(tmp_path: Path, hub: HubHandle) -> None:
    hub.repo(REPO).corrupt(SHARD)
    source, plan = plan_for(hub)
    got = await _fails(tmp_path, source, plan, "DigestMismatch")
    assert SHARD in got.message and "sha256 is" in got.message, got


async def test_a_small_file_is_checked_against_its_git_blob_id(tmp_path: Path, hub: HubHandle) -> None:
    hub.repo(REPO).corrupt("config.json")
    source, plan = plan_for(hub)
    got = await _fails(tmp_path, source, plan, "DigestMismatch")
    assert "config.json" in got.message and "git blob id is" in got.message, got


async def test_a_directory_over_the_budget_is_refused_before_a_byte_is_asked(tmp_path: Path, hub: HubHandle) -> None:
    source, plan = plan_for(hub)
    f = hub_fetcher(tmp_path, budget=500_000)
    got = await settled(f, source, plan)
    assert isinstance(got, Failed) and got.reason == "InsufficientDisk", got
    assert "the weights budget of" in got.message, got
    assert sum(hub.counters.requests.values()) == 0, "the sum of the files is known: nothing was asked of the hub"
    await f.close()


async def test_an_unreachable_hub_is_said_and_the_fetch_goes_on_when_it_answers(tmp_path: Path,
                                                                                 hub: HubHandle) -> None:
    await hub.down()
    source, plan = plan_for(hub)
    f = hub_fetcher(tmp_path)
    got = await _retrying(f, source, plan)
    assert got.reason == "HubUnreachable" and "the hub at 127.0.0.1" in got.message, got
    assert f.statuses()[0].reason == "HubUnreachable"
    await hub.up()
    assert isinstance(await settled(f, source, plan), Ready)
    await f.close()


async def test_a_hub_answering_503_is_unreachable_not_failed(tmp_path: Path, hub: HubHandle) -> None:
    await hub.down(refuse=False)
    source, plan = plan_for(hub)
    f = hub_fetcher(tmp_path)
    got = await _retrying(f, source, plan)
    assert got.reason == "HubUnreachable" and "answered 503" in got.message, got
    await hub.up()
    assert isinstance(await settled(f, source, plan), Ready)
    await f.close()


async def test_no_file_list_is_said_and_nothing_is_asked(tmp_path: Path, hub: HubHandle) -> None:
    source, _ = plan_for(hub)
    f = hub_fetcher(tmp_path)
    got = f.ensure(source, WeightsPlan())
    assert isinstance(got, Waiting) and got.reason == "HubResolving", got
    assert f"the control plane sent no file list for {source}" in got.message
    unpinned = f.ensure(f"hf://{REPO}", None)
    assert isinstance(unpinned, Waiting) and "not pinned to a commit" in unpinned.message, unpinned
    assert sum(hub.counters.requests.values()) == 0
    await f.close()


async def test_a_failed_directory_keeps_what_arrived_for_the_next_try(tmp_path: Path, hub: HubHandle) -> None:
    """One shard corrupt: the directory fails, the other files stay whole; once the hub serves it right, only that
    shard is asked for again."""
    hub.repo(REPO).corrupt(SHARD)
    source, plan = plan_for(hub)
    f = hub_fetcher(tmp_path)
    assert isinstance(await settled(f, source, plan), Failed)
    f.keep(set())  # no shard wants it for now; a later one does
    hub.repo(REPO).heal()
    hub.counters.reset()
    got = await settled(f, source, plan)
    assert isinstance(got, Ready), got
    assert dict(hub.counters.bytes_sent) == {SHARD: 300_000}, hub.counters.bytes_sent
    await f.close()


@pytest.mark.real  # mounts a tmpfs: a process
async def test_a_disk_filling_while_files_arrive_is_disk_full_and_space_back_resumes(tmp_path: Path,
                                                                                    hub: HubHandle) -> None:
    """A real small disk (tmpfs) filled by another writer part way: said in the node's words, nothing under the
    final name; once the space is back the directory is tried again and completed."""
    with small_disk(tmp_path / "w", 40) as disk:
        hub.slow(300_000)
        source, plan = plan_for(hub)
        f = hub_fetcher(disk)
        f.ensure(source, plan)
        await await_until(lambda: any(s.state == "fetching" and s.done_bytes > 50_000 for s in f.statuses()), 20,
                          "files arriving")
        filler = fill(disk, 0)
        got = await settled(f, source, plan)
        # a file being written meets the full disk (DiskFull), or one about to start is refused first (its size is
        # known): either way the disk is named
        assert isinstance(got, Failed) and got.reason in ("DiskFull", "InsufficientDisk"), got
        assert str(disk) in got.message and ("No space left" in got.message or "0 bytes free" in got.message), got
        assert not hubdir.dir_for(disk, source).exists()
        filler.unlink()
        hub.slow(0)
        assert isinstance(await settled(f, source, plan), Ready)
        await f.close()
