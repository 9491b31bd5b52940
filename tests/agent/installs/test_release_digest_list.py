"""An archive the operator did not pin is checked against the digest its release lists (GitHub's release API, here
served from loopback). A file the list does not name, or names without a sha256, and a list that cannot be read
(missing, not JSON, too big, hostile) are refused before any archive is fetched: `DigestUnknown`. A listed digest
the file does not have is `DigestMismatch`. Nothing is installed either way."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmgw.agent.installs.installer import Installer
from llmgw.agent.installs.recipes import DOWNLOADS, download_names, install, stale_downloads
from llmgw.core.clock import FakeClock
from llmgw.core.errors import InstallRefused
from llmgw.wire.digest_lists import LIST_MAX
from llmgw.wire.engines import EngineSource, EngineVariant
from llmgw.wire.messages import Hardware
from tests.agent.installs.archives import file_member, only, sha256
from tests.agent.installs.cuda_builds import CPU_ARCHIVE, CUDA_ARCHIVE, CUDART_ARCHIVE, RELEASE_API, TAG, release_json
from tests.agent.installs.release import Release, release_server
from tests.agent.installs.test_install import context, good
from tests.agent.installs.test_installer import settle


@pytest.fixture
def rel() -> Iterator[Release]:
    with release_server(Release()) as r:
        rel_files = {CPU_ARCHIVE: good(TAG), CUDA_ARCHIVE: good(TAG), CUDART_ARCHIVE: b"libcudart"}
        r.files.update(rel_files)
        r.files[RELEASE_API] = release_json(rel_files)
        yield r


def cpu(rel: Release, sha: str = "") -> EngineSource:
    v = EngineVariant(variant="cpu-x86_64", url=rel.url(CPU_ARCHIVE), sha256=sha)
    return EngineSource(name="llamacpp", version=TAG, variants=[v], digests_url=rel.url(RELEASE_API))


def cuda(rel: Release) -> EngineSource:
    v = EngineVariant(variant="cuda12-x86_64", url=rel.url(CUDA_ARCHIVE), cuda="12.8",
                      runtime_url=rel.url(CUDART_ARCHIVE))
    return EngineSource(name="llamacpp", version=TAG, variants=[v], digests_url=rel.url(RELEASE_API))


async def refused(root: Path, source: EngineSource) -> InstallRefused:
    with pytest.raises(InstallRefused) as e:
        await install(context(root), source, source.variants[0], lambda w: None)
    assert not (root / "llamacpp").exists() or list((root / "llamacpp").iterdir()) == [], "nothing installed"
    assert [p.name for p in (root / DOWNLOADS).iterdir()] == [], "no archive kept, nor the list"
    return e.value


def fetched(rel: Release, name: str) -> int:
    return [n for n, _ in rel.ranges].count(name)


async def test_the_digest_the_release_lists_is_the_one_checked(tmp_path: Path, rel: Release) -> None:
    status = await install(context(tmp_path), cpu(rel), cpu(rel).variants[0], lambda w: None)
    assert status.runs and fetched(rel, RELEASE_API) == 1
    rel.files[RELEASE_API] = release_json(rel.files, {CPU_ARCHIVE: "sha256:" + "0" * 64})
    err = await refused(tmp_path / "again", cpu(rel))
    assert err.reason == "DigestMismatch" and "the published digest is " + "0" * 64 in str(err), err


async def test_a_pinned_digest_reads_no_list(tmp_path: Path, rel: Release) -> None:
    source = cpu(rel, sha=sha256(good(TAG)))
    assert (await install(context(tmp_path), source, source.variants[0], lambda w: None)).runs
    assert fetched(rel, RELEASE_API) == 0


async def test_a_file_the_list_does_not_name_is_not_fetched(tmp_path: Path, rel: Release) -> None:
    rel.files[RELEASE_API] = release_json(rel.files, {CPU_ARCHIVE: None})
    err = await refused(tmp_path, cpu(rel))
    assert err.reason == "DigestUnknown", err
    assert f"{CPU_ARCHIVE} is not among the assets the digest list at {rel.url(RELEASE_API)} names" in str(err)
    assert fetched(rel, CPU_ARCHIVE) == 0


async def test_a_companion_the_list_does_not_name_is_refused_by_its_name(tmp_path: Path, rel: Release) -> None:
    rel.files[RELEASE_API] = release_json(rel.files, {CUDART_ARCHIVE: None})
    err = await refused(tmp_path, cuda(rel))
    assert err.reason == "DigestUnknown" and f"{CUDART_ARCHIVE} is not among the assets" in str(err), err
    assert fetched(rel, CUDA_ARCHIVE) == fetched(rel, CUDART_ARCHIVE) == 0


def _with_assets(assets: object) -> bytes:
    return json.dumps({"tag_name": TAG, "assets": assets}).encode()


HOSTILE: dict[str, tuple[bytes | None, str]] = {
    "too big": (b'{"assets": [], "pad": "' + b"x" * LIST_MAX + b'"}', "allowed"),
    "not JSON": (b"<html>API rate limit exceeded</html>", "is not JSON"),
    "nested without end": (b"[" * 200_000, "is not JSON"),
    "a list, not a release": (b"[]", "has no assets list"),
    "assets not a list": (_with_assets({"name": CPU_ARCHIVE}), "has no assets list"),
    "no such release (404)": (None, "answered 404"),
    "sha512": (_with_assets([{"name": CPU_ARCHIVE, "digest": "sha512:" + "a" * 128}]), "no sha256"),
    "upper-case hex": (_with_assets([{"name": CPU_ARCHIVE, "digest": "sha256:" + "A" * 64}]), "no sha256"),
    "short hex": (_with_assets([{"name": CPU_ARCHIVE, "digest": "sha256:" + "a" * 63}]), "no sha256"),
    "hex and more": (_with_assets([{"name": CPU_ARCHIVE, "digest": "sha256:" + "a" * 64 + "\n"}]), "no sha256"),
    "digest null": (_with_assets([{"name": CPU_ARCHIVE, "digest": None}]), "no sha256 (its digest: 'none')"),
    "digest a number": (_with_assets([{"name": CPU_ARCHIVE, "digest": 7}]), "no sha256"),
    "no digest": (_with_assets([{"name": CPU_ARCHIVE}]), "no sha256"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
async def test_a_list_that_cannot_be_read_or_trusted_refuses_the_install(
    case: str, tmp_path: Path, rel: Release
) -> None:
    body, words = HOSTILE[case]
    if body is None:
        del rel.files[RELEASE_API]
    else:
        rel.files[RELEASE_API] = body
    err = await refused(tmp_path, cpu(rel))
    assert err.reason == "DigestUnknown" and words in str(err), err
    assert rel.url(RELEASE_API) in str(err), "the words name the address read"
    assert fetched(rel, CPU_ARCHIVE) == 0


async def test_a_cut_download_of_an_unpinned_archive_is_kept_and_resumed(tmp_path: Path, rel: Release) -> None:
    """Its digest is known only once the attempt reads the list: the part is kept under the URL's hash, which the
    installer's cleanup (download_names) keeps between attempts."""
    source = cpu(rel)
    rel.cut_after[CPU_ARCHIVE] = 3_000_000
    with pytest.raises(InstallRefused) as e:
        await install(context(tmp_path), source, source.variants[0], lambda w: None)
    assert e.value.reason == "DownloadFailed"
    (part,) = (tmp_path / DOWNLOADS).iterdir()
    assert part.name.removesuffix(".part") in download_names(source, source.variants[0])
    assert stale_downloads(tmp_path, download_names(source, source.variants[0])) == []
    assert (await install(context(tmp_path), source, source.variants[0], lambda w: None)).runs
    assert rel.ranges[-1] == (CPU_ARCHIVE, "bytes=3000000-"), "the second attempt asked only for the rest"


async def test_the_installer_keeps_a_cut_companion_download_for_the_next_attempt(tmp_path: Path, rel: Release) -> None:
    """Between attempts the installer removes downloads nothing wants: a part kept under the URL's hash, the
    companion's too, is wanted."""
    rel.files[CUDART_ARCHIVE] = only(file_member("libcudart.so.12.8.90", os.urandom(3_000_000)))
    rel.files[RELEASE_API] = release_json({n: rel.files[n] for n in (CPU_ARCHIVE, CUDA_ARCHIVE, CUDART_ARCHIVE)})
    rel.cut_after[CUDART_ARCHIVE] = 1_000_000
    source = cuda(rel)
    ctx = context(tmp_path)
    assert isinstance(ctx.clock, FakeClock)
    inst = Installer(ctx)
    node = Hardware(arch="x86_64", nvidia_driver="570.86.10", nvidia_cuda="12.8")
    await inst.converge([source], node, set())
    await settle(inst)
    assert inst.statuses()[0].reason == "DownloadFailed", inst.statuses()
    await inst.converge([source], node, set())  # not busy: what nothing wants is removed now
    kept = sorted(p.name.split("-", 1)[1] for p in (tmp_path / DOWNLOADS).iterdir())
    assert kept == sorted([CUDA_ARCHIVE, CUDART_ARCHIVE + ".part"]), "both kept, under their URLs' hashes"
    ctx.clock.advance(60)
    await inst.converge([source], node, set())
    await settle(inst)
    (st,) = inst.statuses()
    assert st.runs and st.variant == "cuda12-x86_64", st
    assert rel.ranges[-1] == (CUDART_ARCHIVE, "bytes=1000000-"), "the companion was resumed, not fetched again"
