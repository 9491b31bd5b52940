"""Installing llama.cpp from a release archive: real HTTP on loopback, a real archive of the llama-server built
here, and archives that are bad in one way each. Every bad one is refused in the node's words, writes nothing
outside the install directory and leaves the previous build as it was."""

from __future__ import annotations

import functools
import os
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmgw.agent.installs.packages import PackageTool
from llmgw.agent.installs.recipes import MARKER, Context, Limits, install, read_marker
from llmgw.core.clock import FakeClock
from llmgw.core.errors import InstallRefused
from llmgw.wire.engines import EngineSource, EngineVariant
from tests.agent.installs.archives import (
    SETUID,
    dir_member,
    file_member,
    link_member,
    llama_archive,
    only,
    sha256,
    special_member,
)
from tests.agent.installs.release import Release, release_server


@functools.cache
def good(version: str) -> bytes:
    return llama_archive(version)


def name_of(version: str) -> str:
    return f"llama-{version}-bin-ubuntu-x64.tar.gz"


@pytest.fixture
def rel() -> Iterator[Release]:
    with release_server(Release()) as r:
        yield r


def publish(rel: Release, version: str, data: bytes, digest: str | None = None) -> EngineSource:
    rel.files[name_of(version)] = data
    variant = EngineVariant(variant="cpu-x86_64", url=rel.url(name_of(version)), sha256=digest or sha256(data))
    return EngineSource(name="llamacpp", version=version, variants=[variant])


def context(root: Path) -> Context:
    # no package is named by these sources, so no package tool runs; one that did would fail loudly
    return Context(root=root, clock=FakeClock(), packages=PackageTool(apt_get="false", dpkg_query="false"),
                   python="python3", limits=Limits())


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under root with its size and modification time, symlinks not followed."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for n in dirs + files:
            p = Path(dirpath) / n
            st = p.lstat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


async def attempt(ctx: Context, source: EngineSource, said: list[str] | None = None) -> InstallRefused:
    with pytest.raises(InstallRefused) as e:
        await install(ctx, source, source.variants[0], (said if said is not None else []).append)
    return e.value


async def test_an_archive_is_downloaded_verified_unpacked_and_proven_to_run(tmp_path: Path, rel: Release) -> None:
    ctx = context(tmp_path / "engines")
    source = publish(rel, "b1", good("b1"))
    said: list[str] = []
    status = await install(ctx, source, source.variants[0], said.append)
    assert status.runs and status.reason == "", status
    build = tmp_path / "engines" / "llamacpp" / "b1-cpu-x86_64"
    assert status.path == str(build / "llama-b1" / "llama-server")
    assert read_marker(build) is not None
    assert any(w.startswith(f"installing llamacpp b1: downloading {name_of('b1')}, ") and " of " in w for w in said)
    assert list((tmp_path / "engines" / ".downloads").iterdir()) == [], "the archive is not kept once installed"
    assert not [p for p in (tmp_path / "engines" / "llamacpp").iterdir() if p.name.startswith(".staging")]


ESCAPES = {
    "dot-dot": ([file_member("llama-b2/../../evil")], "would land outside the install directory"),
    "absolute path": ([file_member("/tmp/llmgw-test-evil")], "has an absolute path"),
    "symlink to an absolute path": ([link_member("llama-b2/etc", "/etc")], "points to an absolute path"),
    "symlink pointing out": ([link_member("llama-b2/up", "../../..")], "points outside the install directory"),
    "hardlink pointing out": ([link_member("llama-b2/pw", "../../../etc/passwd", hard=True)],
                              "hardlink 'llama-b2/pw' points outside"),
    # each link alone stays inside when read as text; through the first, the second climbs out of the directory
    "symlink chain": ([dir_member("d1"), dir_member("d1/d2"), link_member("d1/d2/s1", ".."),
                       link_member("d1/d2/s1/s2", "../.."), file_member("d1/d2/s1/s2/evil")],
                      "lies through the archive's own symlink 'd1/d2/s1'"),
    "link to the top itself": ([link_member("llama-b2/top", "..")], "points outside the install directory"),
    "a name that comes twice": ([file_member("llama-b2/x"), link_member("llama-b2/y", "x"),
                                 file_member("llama-b2/x")], "comes twice"),
    "a file written over a symlink": ([link_member("llama-b2/lib", "real"), file_member("llama-b2/real"),
                                       file_member("llama-b2/lib")], "comes twice"),
    "a hardlink to nothing before it": ([link_member("llama-b2/h", "nosuch/../big", hard=True)],
                                        "points outside the install directory, or not at a file before it"),
    "device file": ([special_member("llama-b2/null", tarfile.CHRTYPE)], "is a device or special file"),
    "fifo": ([special_member("llama-b2/pipe", tarfile.FIFOTYPE)], "is a device or special file"),
    "setuid bit": ([file_member("llama-b2/llama-server", b"#!/bin/sh\n", mode=SETUID)], "is setuid or setgid"),
}


@pytest.mark.parametrize("case", sorted(ESCAPES))
async def test_an_archive_that_escapes_is_refused_and_writes_nothing_outside(
    case: str, tmp_path: Path, rel: Release
) -> None:
    members, words = ESCAPES[case]
    root = tmp_path / "node" / "engines"
    root.mkdir(parents=True)
    before = tree(tmp_path)
    err = await attempt(context(root), publish(rel, "b2", only(*members)))
    assert err.reason == "ArchiveUnsafe", err
    assert words in str(err), str(err)
    after = {k: v for k, v in tree(tmp_path).items() if "/.downloads" not in k}
    assert set(after) - set(before) <= {"node/engines/llamacpp", "node/engines/.downloads"}, after
    assert not Path("/tmp/llmgw-test-evil").exists()


async def test_a_wrong_digest_is_refused_and_not_kept(tmp_path: Path, rel: Release) -> None:
    ctx = context(tmp_path / "engines")
    source = publish(rel, "b1", good("b1"), digest="0" * 64)
    err = await attempt(ctx, source)
    assert err.reason == "DigestMismatch" and "the published digest is " + "0" * 64 in str(err), err
    assert list((tmp_path / "engines" / ".downloads").iterdir()) == [], "a wrong file is not resumed next time"
    assert not (tmp_path / "engines" / "llamacpp").exists()


async def test_a_cut_download_is_reported_and_resumed_by_the_next_attempt(tmp_path: Path, rel: Release) -> None:
    ctx = context(tmp_path / "engines")
    data = good("b1")
    source = publish(rel, "b1", data)
    rel.cut_after[name_of("b1")] = 3_000_000
    err = await attempt(ctx, source)
    assert err.reason == "DownloadFailed" and "stopped at 3 MB" in str(err), err
    (part,) = (tmp_path / "engines" / ".downloads").iterdir()
    assert part.name == f"{sha256(data)[:16]}-{name_of('b1')}.part", "kept under its digest: no other version's"
    assert part.stat().st_size == 3_000_000, "what arrived is kept, under a name nothing else reads"
    status = await install(ctx, source, source.variants[0], lambda w: None)
    assert status.runs
    assert rel.ranges[-1] == (name_of("b1"), "bytes=3000000-"), "the second attempt asked only for the rest"


async def test_a_version_the_source_does_not_have_is_refused(tmp_path: Path, rel: Release) -> None:
    source = publish(rel, "b1", good("b1"))
    missing = source.model_copy(update={"version": "b999", "variants": [
        source.variants[0].model_copy(update={"url": rel.url(name_of("b999"))})]})
    err = await attempt(context(tmp_path / "engines"), missing)
    assert err.reason == "DownloadFailed" and "answered 404" in str(err), err


async def test_a_build_missing_a_shared_library_names_it(tmp_path: Path, rel: Release) -> None:
    source = publish(rel, "b3", llama_archive("b3", leave_out="libllama-common"))
    err = await attempt(context(tmp_path / "engines"), source)
    assert err.reason == "MissingLibraries", err
    assert "missing libraries: libllama-common.so.0" in str(err), err
    assert not (tmp_path / "engines" / "llamacpp" / "b3-cpu-x86_64").exists()


async def test_a_failed_version_leaves_the_working_one_untouched(tmp_path: Path, rel: Release) -> None:
    ctx = context(tmp_path / "engines")
    b1 = publish(rel, "b1", good("b1"))
    await install(ctx, b1, b1.variants[0], lambda w: None)
    build = tmp_path / "engines" / "llamacpp" / "b1-cpu-x86_64"
    before = tree(build)
    for bad in (publish(rel, "b2", good("b2"), digest="1" * 64),
                publish(rel, "b2", only(file_member("llama-b2/../../../evil"))),
                publish(rel, "b2", llama_archive("b2", leave_out="libggml-base"))):
        await attempt(ctx, bad)
        assert tree(build) == before
        assert sorted(p.name for p in build.parent.iterdir()) == ["b1-cpu-x86_64"]


def _mount_small(path: Path, size: str) -> bool:
    path.mkdir(parents=True)
    if os.geteuid() != 0:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    disk = tmp_path / "disk"
    if not _mount_small(disk, "12m"):
        pytest.skip("needs root to mount a small tmpfs")  # CI runs as root: this runs there
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


async def test_a_disk_that_fills_during_unpack_is_reported_and_cleaned_up(small_disk: Path, rel: Release) -> None:
    root = small_disk / "engines"
    previous = root / "llamacpp" / "b0-cpu-x86_64"
    previous.mkdir(parents=True)
    (previous / MARKER).write_text('{"executable": "llama-server"}')
    (previous / "llama-server").write_bytes(b"\x7fELF" + b"0" * 1000)
    before = tree(previous)
    data = good("b1")
    assert 4_000_000 < len(data) < 10_000_000, "the archive fits the disk; what it unpacks to does not"
    err = await attempt(context(root), publish(rel, "b1", data))
    assert err.reason == "DiskFull" and "No space left on device" in str(err), err
    assert tree(previous) == before
    assert sorted(p.name for p in (root / "llamacpp").iterdir()) == ["b0-cpu-x86_64"], "the half unpack is gone"


async def test_two_versions_served_under_one_file_name_never_resume_each_other(tmp_path: Path, rel: Release) -> None:
    """b1's download is cut; b2's archive has the same file name (another folder of the release server): b2 must
    not take b1's partial file for its own beginning."""
    ctx = context(tmp_path / "engines")
    sources = {}
    for version in ("b1", "b2"):
        data = good(version)
        rel.files[f"{version}/llama.tar.gz"] = data
        v = EngineVariant(variant="cpu-x86_64", url=rel.url(f"{version}/llama.tar.gz"), sha256=sha256(data))
        sources[version] = EngineSource(name="llamacpp", version=version, variants=[v])
    rel.cut_after["b1/llama.tar.gz"] = 2_000_000
    err = await attempt(ctx, sources["b1"])
    assert err.reason == "DownloadFailed"
    status = await install(ctx, sources["b2"], sources["b2"].variants[0], lambda w: None)
    assert status.runs and "/b2-cpu-x86_64/" in status.path
    assert ("b2/llama.tar.gz", "") in rel.ranges, "b2 was fetched from its start"


async def test_a_command_that_prints_without_end_is_kept_to_its_first_megabytes() -> None:
    from llmgw.agent.installs.probe import OUTPUT_MAX, run

    r = await run(["sh", "-c", "head -c 50000000 /dev/zero | tr '\\0' x; echo done"], timeout=60)
    assert r.code == 0 and len(r.output) == OUTPUT_MAX and set(r.output) == {"x"}
