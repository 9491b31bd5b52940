"""The stand-in hub spoken to by huggingface_hub itself over loopback: what the library resolves and downloads from
it is exactly the directory it serves, and each fault switch shows the way the real hub's faults do."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import httpx2
import pytest
import pytest_asyncio
from huggingface_hub import HfApi, hf_hub_download, snapshot_download
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from llmgw.sim.hub import HubHandle, start_hub
from llmgw.sim.hub_repo import HubRepo, write_sample_model
from tests.sim.hubs import REPO, SMALL_LFS, TOKEN, digests, sha256_of
from tests.sim.procs import DEADLINE, SRC, free_port

SHARD = 200_000


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    return write_sample_model(tmp_path / "model", shards=2, shard_bytes=SHARD)


@pytest_asyncio.fixture
async def hub(model_dir: Path) -> AsyncIterator[HubHandle]:
    h = await start_hub([HubRepo.from_dir(REPO, model_dir, lfs_threshold=SMALL_LFS),
                         HubRepo.from_dir("acme/gated", model_dir, lfs_threshold=SMALL_LFS, gated=True),
                         HubRepo.from_dir("acme/private", model_dir, lfs_threshold=SMALL_LFS, private=True)],
                        tokens=[TOKEN])
    yield h
    await h.close()


def _api(hub: HubHandle, token: str | bool = False) -> HfApi:
    return HfApi(endpoint=hub.url, token=token)  # token=False: never a token read from the environment


async def test_snapshot_download_gets_exactly_the_served_files(hub: HubHandle, model_dir: Path, tmp_path: Path) -> None:
    got = await asyncio.to_thread(snapshot_download, REPO, revision="main", endpoint=hub.url, token=False,
                                  cache_dir=tmp_path / "cache")
    assert digests(Path(got)) == digests(model_dir)
    assert Path(got).name == hub.repo(REPO).head
    assert hub.counters.bytes_sent == {path: size for path, (size, _, _) in digests(model_dir).items()}


async def test_model_info_gives_the_commit_sizes_and_digests(hub: HubHandle, model_dir: Path) -> None:
    info = await asyncio.to_thread(_api(hub).model_info, REPO, revision="main", files_metadata=True)
    assert info.sha == hub.repo(REPO).head and info.gated is False and info.private is False
    assert info.siblings is not None
    on_disk = digests(model_dir)
    assert {s.rfilename for s in info.siblings} == set(on_disk)
    for s in info.siblings:
        size, sha256, sha1 = on_disk[s.rfilename]
        assert s.size == size
        if s.lfs is not None:  # large or weights: the hub gives sha256; the blob id is the LFS pointer's
            assert (s.lfs.sha256, s.lfs.size) == (sha256, size) and s.blob_id != sha1
        else:
            assert s.blob_id == sha1
    lfs = {s.rfilename for s in info.siblings if s.lfs}
    assert lfs == {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "pytorch_model.bin",
                   "onnx/model.onnx"}


async def test_commit_id_follows_the_content(tmp_path: Path) -> None:
    a = HubRepo.from_dir("a/b", write_sample_model(tmp_path / "a", shard_bytes=1000))
    b = HubRepo.from_dir("a/b", write_sample_model(tmp_path / "b", shard_bytes=1000))
    c = HubRepo.from_dir("a/b", write_sample_model(tmp_path / "c", shard_bytes=1000, seed=1))
    assert a.head == b.head != c.head and len(a.head) == 40


async def test_lfs_files_go_through_the_cdn_and_the_token_never_does(hub: HubHandle, tmp_path: Path) -> None:
    got = await asyncio.to_thread(snapshot_download, "acme/gated", revision="main", endpoint=hub.url, token=TOKEN,
                                  cache_dir=tmp_path / "cache")
    assert (Path(got) / "pytorch_model.bin").stat().st_size == SHARD
    sites = {site for _, site, _ in hub.counters.authorized}
    assert sites == {"hub"}
    cdn = [p for p in hub.counters.requests if p.startswith("/cdn-lfs/")]
    assert len(cdn) == 4  # the shards, the .bin, the .onnx


async def test_ranges(hub: HubHandle, model_dir: Path) -> None:
    commit = hub.repo(REPO).head
    url = f"{hub.url}/{REPO}/resolve/{commit}/pytorch_model.bin"
    whole = (model_dir / "pytorch_model.bin").read_bytes()
    async with aiohttp.ClientSession() as s:
        async with s.head(url, allow_redirects=False) as r:
            assert r.status == 302 and r.headers["X-Linked-Size"] == str(SHARD)
            assert r.headers["X-Repo-Commit"] == commit and r.headers["Location"].startswith(hub.cdn_url)
        async with s.get(url, headers={"Range": "bytes=1000-"}) as r:
            assert r.status == 206 and r.headers["Content-Range"] == f"bytes 1000-{SHARD - 1}/{SHARD}"
            assert await r.read() == whole[1000:]
        async with s.get(url, headers={"Range": "bytes=10-19"}) as r:
            assert r.status == 206 and await r.read() == whole[10:20]
        async with s.get(url, headers={"Range": f"bytes={SHARD}-"}) as r:
            assert r.status == 416 and r.headers["Content-Range"] == f"bytes */{SHARD}"
        async with s.get(f"{hub.url}/{REPO}/resolve/{commit}/config.json", headers={"Range": "bytes=2-"}) as r:
            assert r.status == 206 and await r.read() == (model_dir / "config.json").read_bytes()[2:]
            assert r.headers["ETag"].strip('"') == digests(model_dir)["config.json"][2]


async def test_a_moved_branch_resolves_to_its_new_commit_and_the_old_stays_served(hub: HubHandle) -> None:
    repo = hub.repo(REPO)
    old = repo.head
    new = repo.move("main", {"config.json": b'{"model_type": "llama", "changed": true}'})
    assert new != old
    api = _api(hub)
    assert (await asyncio.to_thread(api.model_info, REPO, revision="main")).sha == new
    assert (await asyncio.to_thread(api.model_info, REPO, revision=old)).sha == old
    repo.forget(old)
    with pytest.raises(RevisionNotFoundError):
        await asyncio.to_thread(api.model_info, REPO, revision=old)


async def test_truncated_and_corrupted_files(hub: HubHandle, model_dir: Path, tmp_path: Path) -> None:
    repo = hub.repo(REPO)
    url = f"{hub.url}/{REPO}/resolve/{repo.head}/model-00001-of-00002.safetensors"
    repo.truncate("model-00001-of-00002.safetensors", 5000)
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        assert r.status == 200 and r.content_length == SHARD
        with pytest.raises(aiohttp.ClientPayloadError):
            await r.read()
    repo.heal()
    repo.corrupt("model-00001-of-00002.safetensors")
    got = await asyncio.to_thread(hf_hub_download, REPO, "model-00001-of-00002.safetensors", endpoint=hub.url,
                                  token=False, local_dir=tmp_path / "d")
    assert Path(got).stat().st_size == SHARD
    assert sha256_of(Path(got)) != sha256_of(model_dir / "model-00001-of-00002.safetensors")


async def test_down_refuses_connections_or_answers_503_and_up_restores(hub: HubHandle) -> None:
    api = _api(hub)
    await hub.down()
    with pytest.raises(httpx2.ConnectError):
        await asyncio.to_thread(api.model_info, REPO)
    await hub.up()
    await hub.down(refuse=False)
    with pytest.raises(HfHubHTTPError) as e:
        await asyncio.to_thread(api.model_info, REPO)
    assert e.value.response.status_code == 503
    await hub.up()
    assert (await asyncio.to_thread(api.model_info, REPO)).sha == hub.repo(REPO).head


async def test_access_errors_are_the_hubs(hub: HubHandle, tmp_path: Path) -> None:
    api = _api(hub)
    gated = await asyncio.to_thread(api.model_info, "acme/gated", files_metadata=True)
    assert gated.gated == "auto" and gated.siblings  # its info and file list are open to anyone
    with pytest.raises(GatedRepoError):
        await asyncio.to_thread(hf_hub_download, "acme/gated", "config.json", endpoint=hub.url, token=False,
                                cache_dir=tmp_path / "c")
    with pytest.raises(RepositoryNotFoundError):
        await asyncio.to_thread(api.model_info, "acme/private")
    assert (await asyncio.to_thread(_api(hub, TOKEN).model_info, "acme/private")).private is True
    with pytest.raises(HfHubHTTPError) as e:
        await asyncio.to_thread(_api(hub, "hf_wrong").model_info, REPO)
    assert e.value.response.status_code == 401
    with pytest.raises(RepositoryNotFoundError):
        await asyncio.to_thread(api.model_info, "acme/none")
    with pytest.raises(RevisionNotFoundError):
        await asyncio.to_thread(api.model_info, REPO, revision="no-such-branch")
    with pytest.raises(RemoteEntryNotFoundError):
        await asyncio.to_thread(hf_hub_download, REPO, "no.json", endpoint=hub.url, token=False,
                                cache_dir=tmp_path / "c")


async def test_nothing_outside_the_repository_is_served(hub: HubHandle, model_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("s")
    commit = hub.repo(REPO).head
    async with aiohttp.ClientSession() as s:
        for path in ("../secret", "%2E%2E/secret", "..%2Fsecret", "original/../../secret"):
            async with s.get(f"{hub.url}/{REPO}/resolve/{commit}/{path}") as r:
                assert r.status in (400, 404) and await r.read() != b"s"
    os.symlink(tmp_path / "secret", model_dir / "linked")
    with pytest.raises(ValueError, match="not a regular file"):
        HubRepo.from_dir(REPO, model_dir)


async def test_runs_as_a_process(model_dir: Path, tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "llmgw.sim.hub", "--listen", f"127.0.0.1:{port}", "--repo", f"{REPO}={model_dir}",
        stdout=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL, env=env)
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), DEADLINE)).decode()
        assert line.strip() == f"listening on http://127.0.0.1:{port}"
        info = await asyncio.to_thread(HfApi(endpoint=f"http://127.0.0.1:{port}", token=False).model_info, REPO)
        assert info.sha is not None and len(info.sha) == 40
    finally:
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), DEADLINE) == 0
