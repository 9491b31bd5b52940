"""Resolving a hub source against the stand-in hub over real HTTP on loopback: the commit a revision names, the
files an engine needs with the digests the files on disk have, and each way the hub can say no, as a Reason."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from llmgw.control.hub.hub import resolve
from llmgw.core.errors import HubFailed
from llmgw.core.reasons import Reason
from llmgw.sim.hub import HubHandle, start_hub
from llmgw.sim.hub_repo import HubRepo, write_sample_model
from llmgw.wire.hub import HubRef, Resolution, parse_hub
from tests.sim.hubs import REPO, SMALL_LFS, TOKEN, digests

TIMEOUT = 5.0
WANTED = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json",
          "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
          "special_tokens_map.json"}


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    return write_sample_model(tmp_path / "model", shards=2, shard_bytes=100_000)


@pytest_asyncio.fixture
async def hub(model_dir: Path, tmp_path: Path) -> AsyncIterator[HubHandle]:
    bin_only = {p: (model_dir / p) for p in ("pytorch_model.bin", "config.json", "tokenizer.json")}
    repos = [HubRepo.from_dir(REPO, model_dir, lfs_threshold=SMALL_LFS),
             HubRepo.from_dir("acme/gated", model_dir, lfs_threshold=SMALL_LFS, gated=True),
             HubRepo.from_dir("acme/private", model_dir, lfs_threshold=SMALL_LFS, private=True),
             HubRepo.from_dir("acme/terms", model_dir, lfs_threshold=SMALL_LFS, gated=True, readers=frozenset()),
             HubRepo.from_files("acme/bin-only", bin_only, lfs_threshold=SMALL_LFS),
             HubRepo.from_files("acme/no-weights", {"config.json": b"{}", "model.gguf": b"GGUF"})]
    h = await start_hub(repos, tokens=[TOKEN])
    yield h
    await h.close()


async def _resolve(hub: HubHandle | str, source: str, token: str | None = None) -> Resolution:
    endpoint = hub if isinstance(hub, str) else hub.url
    return await asyncio.to_thread(resolve, parse_hub(source), endpoint, token, TIMEOUT)


async def _refused(hub: HubHandle | str, source: str, token: str | None = None) -> HubFailed:
    with pytest.raises(HubFailed) as e:
        await _resolve(hub, source, token)
    return e.value


async def test_a_branch_resolves_to_its_commit_with_the_engine_files_and_their_digests(
        hub: HubHandle, model_dir: Path) -> None:
    r = await _resolve(hub, f"hf://{REPO}")
    assert (r.repo, r.revision, r.commit, r.gated) == (REPO, "main", hub.repo(REPO).head, False)
    assert r.source == f"hf://{REPO}@{r.commit}"
    assert {f.path for f in r.files} == WANTED  # safetensors only: no .bin, .onnx, original/, README
    on_disk = digests(model_dir)
    for f in r.files:
        size, sha256, sha1 = on_disk[f.path]
        assert f.size == size
        assert (f.sha256, f.git_sha1) == ((sha256, "") if f.path.endswith(".safetensors") else ("", sha1))


async def test_a_pinned_commit_and_a_moved_branch(hub: HubHandle) -> None:
    repo = hub.repo(REPO)
    old = repo.head
    new = repo.move("main", {"config.json": b'{"model_type": "llama", "rope_theta": 1e6}'})
    assert (await _resolve(hub, f"hf://{REPO}@main")).commit == new
    pinned = await _resolve(hub, f"hf://{REPO}@{old}")
    assert pinned.commit == old and pinned.revision == old
    repo.forget(old)
    gone = await _refused(hub, f"hf://{REPO}@{old}")
    assert gone.reason == Reason.HubNotFound and old in str(gone)


async def test_only_bin_weights_when_there_are_no_safetensors(hub: HubHandle) -> None:
    r = await _resolve(hub, "hf://acme/bin-only")
    assert {f.path for f in r.files} == {"pytorch_model.bin", "config.json", "tokenizer.json"}
    assert r.total_bytes == sum(f.size for f in r.files) > 100_000


async def test_no_weights(hub: HubHandle) -> None:
    e = await _refused(hub, "hf://acme/no-weights")
    assert e.reason == Reason.NoWeightsFiles and "model.gguf" in str(e)


async def test_gated_and_private_repositories(hub: HubHandle) -> None:
    e = await _refused(hub, "hf://acme/gated@main")
    assert e.reason == Reason.HubAccessDenied and "hub.token_file" in str(e)
    assert (await _resolve(hub, "hf://acme/gated", TOKEN)).gated
    wrong = await _refused(hub, "hf://acme/gated", "hf_not_the_token")
    assert wrong.reason == Reason.HubAccessDenied and "refused the token" in str(wrong)
    unaccepted = await _refused(hub, "hf://acme/terms", TOKEN)  # a token the hub knows, not granted this repo
    assert unaccepted.reason == Reason.HubAccessDenied and "accepted the terms" in str(unaccepted)
    hidden = await _refused(hub, "hf://acme/private")
    assert hidden.reason == Reason.HubNotFound and "token" in str(hidden)
    assert (await _resolve(hub, "hf://acme/private", TOKEN)).gated


async def test_unknown_repository_and_revision(hub: HubHandle) -> None:
    e = await _refused(hub, "hf://acme/none")
    assert e.reason == Reason.HubNotFound and "no repository acme/none" in str(e)
    e = await _refused(hub, f"hf://{REPO}@v9")
    assert e.reason == Reason.HubNotFound and "no revision 'v9'" in str(e)


async def test_an_unreachable_hub_is_named(hub: HubHandle) -> None:
    await hub.down()
    e = await _refused(hub, f"hf://{REPO}")
    assert e.reason == Reason.HubUnreachable and hub.url in str(e)
    await hub.up()
    await hub.down(refuse=False)
    e = await _refused(hub, f"hf://{REPO}")
    assert e.reason == Reason.HubUnreachable and "503" in str(e) and hub.url in str(e)


async def test_a_hub_that_never_answers_times_out() -> None:
    with socket.socket() as s:  # accepts connections (the kernel's backlog) but never answers
        s.bind(("127.0.0.1", 0))
        s.listen(4)
        endpoint = f"http://127.0.0.1:{s.getsockname()[1]}"
        with pytest.raises(HubFailed) as e:
            await asyncio.to_thread(resolve, HubRef(REPO, "main"), endpoint, None, 0.3)
    assert e.value.reason == Reason.HubUnreachable and "within 0.3s" in str(e.value)


async def test_no_token_leaves_the_resolver_unasked(hub: HubHandle, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_from_the_environment")  # must not be sent: the hub would refuse it
    assert (await _resolve(hub, f"hf://{REPO}")).commit == hub.repo(REPO).head
    assert hub.counters.authorized == []
