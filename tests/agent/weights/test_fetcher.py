"""Fetching a model's weights from an origin made by the test (real HTTP on loopback) that cuts connections,
ignores Range, lies about sizes and holds a download open while the test looks at the disk."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest

from llmgw.agent.weights import local
from llmgw.agent.weights.fetcher import Failed, Fetcher, Ready, Waiting
from llmgw.wire.messages import WeightsPlan
from tests.agent.installs.release import Release
from tests.agent.weights.kit import fetcher, settled
from tests.harness import await_until

DATA = os.urandom(5_000_000)
DIGEST = hashlib.sha256(DATA).hexdigest()


@pytest.fixture(autouse=True)
def model(origin: Release) -> None:
    origin.files["model.gguf"] = DATA


async def test_a_cut_download_resumes_with_a_range_request(tmp_path: Path, origin: Release) -> None:
    origin.cut_after["model.gguf"] = 3_000_000
    f = fetcher(tmp_path)
    got = await settled(f, origin.url("model.gguf"), WeightsPlan(sha256=DIGEST, size=len(DATA)))
    assert isinstance(got, Ready), got
    assert got.path.read_bytes() == DATA
    assert [r for _, r in origin.ranges] == ["", "bytes=3000000-"], "the second request asked only for the rest"
    await f.close()


async def test_a_partial_file_never_has_the_targets_name(tmp_path: Path, origin: Release) -> None:
    gate = origin.hold["model.gguf"] = threading.Event()
    f = fetcher(tmp_path)
    url = origin.url("model.gguf")
    target = local.target_for(tmp_path, url)
    f.ensure(url, None)
    await await_until(lambda: target.with_name(target.name + ".part").exists(), 10, "the download under way")
    o = f.ensure(url, None)
    assert isinstance(o, Waiting) and "fetching from the origin" in o.message, o
    assert not target.exists(), "half a file under the name engines load"
    assert url not in local.visible([tmp_path]), "a partial file is not reported as held weights"
    assert f.statuses()[0].done_bytes > 0 and f.statuses()[0].total_bytes == len(DATA)
    gate.set()
    got = await settled(f, url)
    assert isinstance(got, Ready) and got.path == target and target.read_bytes() == DATA
    assert local.visible([tmp_path]) == [url], "held, and reported by the URL it came from"
    assert not target.with_name(target.name + ".part").exists()
    await f.close()


async def test_a_server_that_ignores_range_does_not_corrupt_the_file(tmp_path: Path, origin: Release) -> None:
    origin.cut_after["model.gguf"] = 3_000_000
    origin.ignore_range.add("model.gguf")
    f = fetcher(tmp_path)
    got = await settled(f, origin.url("model.gguf"), WeightsPlan(sha256=DIGEST))
    assert isinstance(got, Ready), got
    assert got.path.read_bytes() == DATA, "the second answer started at byte 0 and was written from byte 0"
    assert len(origin.ranges) == 2 and origin.ranges[1][1] == "bytes=3000000-"
    await f.close()


async def test_concurrent_shards_make_one_origin_request(tmp_path: Path, origin: Release) -> None:
    gate = origin.hold["model.gguf"] = threading.Event()
    f = fetcher(tmp_path)
    url = origin.url("model.gguf")
    first = [f.ensure(url, WeightsPlan(sha256=DIGEST)) for _ in range(4)]
    assert all(isinstance(o, Waiting) for o in first)
    await await_until(lambda: origin.ranges, 10, "the origin asked")
    again = [f.ensure(url, WeightsPlan(sha256=DIGEST)) for _ in range(4)]
    assert all(isinstance(o, Waiting) for o in again)
    gate.set()
    got = await settled(f, url, WeightsPlan(sha256=DIGEST))
    assert isinstance(got, Ready)
    assert len(origin.ranges) == 1, origin.ranges
    await f.close()


async def test_a_wrong_sha256_is_refused_and_the_file_removed(tmp_path: Path, origin: Release) -> None:
    f = fetcher(tmp_path)
    url = origin.url("model.gguf")
    got = await settled(f, url, WeightsPlan(sha256="0" * 64))
    assert isinstance(got, Failed) and got.reason == "DigestMismatch", got
    assert f"sha256 is {DIGEST}, the catalog says {'0' * 64}; removed" in got.message
    folder = local.folder_for(tmp_path, url)
    assert [p.name for p in folder.iterdir()] == [], "neither the file nor its partial copy is left"
    assert f.statuses()[0].state == "failed" and f.statuses()[0].reason == "DigestMismatch"
    await f.close()


async def test_a_size_other_than_the_catalogs_is_refused(tmp_path: Path, origin: Release) -> None:
    f = fetcher(tmp_path)
    got = await settled(f, origin.url("model.gguf"), WeightsPlan(size=len(DATA) - 1))
    assert isinstance(got, Failed) and got.reason == "SizeMismatch", got
    assert f"serves model.gguf as {len(DATA)} bytes; the catalog says {len(DATA) - 1}" in got.message
    assert not local.target_for(tmp_path, origin.url("model.gguf")).exists()
    await f.close()


async def test_too_little_disk_is_a_refusal_in_the_nodes_words_before_any_request(tmp_path: Path,
                                                                                  origin: Release) -> None:
    f = fetcher(tmp_path)
    got = await settled(f, origin.url("model.gguf"), WeightsPlan(size=4 * 10**15))
    assert isinstance(got, Failed) and got.reason == "InsufficientDisk", got
    assert got.message.startswith("needs 4000.0 TB, ") and got.message.endswith(f" free on {tmp_path}")
    assert origin.ranges == [], "nothing was asked of the origin"
    await f.close()


async def _fetch(f: Fetcher, origin: Release, name: str) -> Path:
    got = await settled(f, origin.url(name))
    assert isinstance(got, Ready), got
    return got.path


async def test_room_is_made_by_removing_the_least_recently_used_file_no_shard_uses(tmp_path: Path,
                                                                                  origin: Release) -> None:
    for n in ("a", "b", "c", "d"):
        origin.files[f"{n}.gguf"] = os.urandom(1_000_000)
    in_use: set[Path] = set()
    f = fetcher(tmp_path, budget=2_500_000, in_use=in_use)
    a = await _fetch(f, origin, "a.gguf")
    b = await _fetch(f, origin, "b.gguf")
    os.utime(a.parent / ".source.json", (1, 1))  # a: used longest ago, but a shard runs from it
    os.utime(b.parent / ".source.json", (2, 2))
    in_use.add(a)
    c = await _fetch(f, origin, "c.gguf")
    assert a.exists() and c.exists() and not b.parent.exists(), "b went: the oldest file nobody uses"
    in_use.add(c)
    got = await settled(f, origin.url("d.gguf"))
    assert isinstance(got, Failed) and got.reason == "InsufficientDisk", got
    assert "budget of 2 MB" in got.message and a.exists() and c.exists(), "files in use are never removed"
    await f.close()


async def test_nothing_is_removed_from_a_network_file_system(tmp_path: Path, origin: Release) -> None:
    origin.files["a.gguf"] = os.urandom(1_000_000)
    origin.files["b.gguf"] = os.urandom(1_000_000)
    f = fetcher(tmp_path, budget=1_500_000, network=True)
    a = await _fetch(f, origin, "a.gguf")
    got = await settled(f, origin.url("b.gguf"))
    assert isinstance(got, Failed) and got.reason == "InsufficientDisk" and a.exists(), got
    await f.close()


def test_the_file_system_under_a_directory_is_read_from_mountinfo(tmp_path: Path) -> None:
    mountinfo = (
        "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
        f"40 22 0:50 / {tmp_path}/filer rw,relatime shared:20 - nfs4 filer:/weights rw,vers=4.2\n"
        "garbage line without separator\n"
    )
    (tmp_path / "filer" / "models").mkdir(parents=True)
    d = local.describe_dir(tmp_path / "filer" / "models", mountinfo, None, 0)
    assert d.fs_type == "nfs4" and d.network and d.total_bytes > 0
    d = local.describe_dir(tmp_path, mountinfo, 5, 3)
    assert d.fs_type == "ext4" and not d.network and d.budget_bytes == 5 and d.managed_bytes == 3
    (tmp_path / "filerx").mkdir()
    assert not local.describe_dir(tmp_path / "filerx", mountinfo, None, 0).network, "a prefix is not a parent"


def test_an_empty_file_and_a_part_file_are_not_weights(tmp_path: Path) -> None:
    (tmp_path / "empty.gguf").touch()
    (tmp_path / "half.gguf.part").write_bytes(b"x")
    (tmp_path / "whole.gguf").write_bytes(b"GGUF")
    folder = local.folder_for(tmp_path, "http://o/m.gguf")
    folder.mkdir(parents=True)
    (folder / "m.gguf").write_bytes(b"GGUF1")
    local.record(folder, "http://o/m.gguf", 4, "")  # the size says another file: not whole
    assert local.visible([tmp_path, tmp_path / "absent"]) == [str(tmp_path / "whole.gguf")]

