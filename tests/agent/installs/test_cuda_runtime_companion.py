"""A llama.cpp CUDA build with its CUDA runtime companion, end to end: a release server on loopback serving the
archives and the release's digest list, the real installer on a node with an NVIDIA driver, the real llama-server
started, and `ldd` reading the CUDA backend plugin that llama-server itself does not link."""

from __future__ import annotations

import platform
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmgw.agent.installs.installer import Installer
from llmgw.agent.installs.recipes import install
from llmgw.core.errors import InstallRefused
from llmgw.wire.engines import EngineSource, EngineVariant
from llmgw.wire.messages import Hardware
from tests.agent.installs.archives import Member, file_member, link_member
from tests.agent.installs.cuda_builds import (
    CPU_ARCHIVE,
    CUDA_ARCHIVE,
    CUDART_ARCHIVE,
    CUDART_FILE,
    RELEASE_API,
    TAG,
    Stubs,
    cuda_archive,
    cudart_archive,
    release_json,
)
from tests.agent.installs.release import Release, release_server
from tests.agent.installs.test_install import context, good
from tests.agent.installs.test_installer import settle

GLIBC = platform.libc_ver()[1]  # this machine's: the builds say they start on it
GPU_NODE = Hardware(arch="x86_64", nvidia_driver="570.86.10", nvidia_cuda="12.8", glibc=GLIBC)


@pytest.fixture
def rel() -> Iterator[Release]:
    with release_server(Release()) as r:
        yield r


def publish(rel: Release, stubs: Stubs, companion: bytes | None = None, main: bytes | None = None,
            runtime: bool = True) -> EngineSource:
    """The release on the server (archives and digest list); a source naming its address and no digest."""
    rel.files.update({CUDA_ARCHIVE: main or cuda_archive(stubs), CPU_ARCHIVE: good(TAG),
                      CUDART_ARCHIVE: companion or cudart_archive(stubs, top="cudart")})
    rel.files[RELEASE_API] = release_json(rel.files)
    cuda = EngineVariant(variant="cuda12-x86_64", url=rel.url(CUDA_ARCHIVE), cuda="12.8", glibc=GLIBC,
                         runtime_url=rel.url(CUDART_ARCHIVE) if runtime else "")
    cpu = EngineVariant(variant="cpu-x86_64", url=rel.url(CPU_ARCHIVE), glibc=GLIBC)
    return EngineSource(name="llamacpp", version=TAG, variants=[cuda, cpu], digests_url=rel.url(RELEASE_API))


async def test_a_cuda_build_installs_with_its_runtime_beside_it_and_runs(
    tmp_path: Path, rel: Release, cuda_stubs: Stubs
) -> None:
    source = publish(rel, cuda_stubs)
    inst = Installer(context(tmp_path / "engines"))
    await inst.converge([source], GPU_NODE, set())
    await settle(inst)
    (st,) = inst.statuses()
    assert st.runs and st.variant == "cuda12-x86_64" and st.passed_over == [], st
    exe = Path(st.path)
    assert exe.parent == tmp_path / "engines" / "llamacpp" / "b1-cuda12-x86_64" / f"llama-{TAG}"
    here = exe.parent
    assert (here / CUDART_FILE).is_file() and not (here / CUDART_FILE).is_symlink()
    assert (here / "libcudart.so.12").readlink() == Path(CUDART_FILE), "the companion's links kept as links"
    assert not (here / "cudart").exists(), "its one top folder is flattened away"
    ldd = subprocess.run(["ldd", str(here / "libggml-cuda.so")], capture_output=True, text=True).stdout
    assert f"libcudart.so.12 => {here}/libcudart.so.12" in ldd, ldd
    assert [name for name, _ in rel.ranges].count(RELEASE_API) == 1, "the digest list is read once per attempt"
    assert list((tmp_path / "engines" / ".downloads").iterdir()) == [], "neither archive is kept once installed"


async def test_without_its_runtime_the_cuda_build_is_passed_over_for_the_cpu_one(
    tmp_path: Path, rel: Release, cuda_stubs: Stubs
) -> None:
    source = publish(rel, cuda_stubs, runtime=False)
    inst = Installer(context(tmp_path / "engines"))
    await inst.converge([source], GPU_NODE, set())
    await settle(inst)  # the CUDA build is installed, and refused: llama-server starts, its CUDA plugin could not
    await inst.converge([source], GPU_NODE, set())
    await settle(inst)
    (st,) = inst.statuses()
    assert st.runs and st.variant == "cpu-x86_64", st
    (passed,) = st.passed_over
    assert passed.variant == "cuda12-x86_64" and passed.reason == "MissingLibraries", passed
    assert "missing libraries: libcudart.so.12 (needed by libggml-cuda.so)" in passed.message, passed
    assert sorted(p.name for p in (tmp_path / "engines" / "llamacpp").iterdir()) == ["b1-cpu-x86_64"]


async def test_its_progress_names_each_archive_as_it_downloads(
    tmp_path: Path, rel: Release, cuda_stubs: Stubs
) -> None:
    source = publish(rel, cuda_stubs)
    said: list[str] = []
    status = await install(context(tmp_path / "engines"), source, source.variants[0], said.append)
    assert status.runs
    assert any(w.startswith(f"installing llamacpp {TAG}: downloading {CUDA_ARCHIVE}, ") for w in said), said
    assert any(w.startswith(f"installing llamacpp {TAG}: downloading {CUDART_ARCHIVE} (its runtime libraries), ")
               for w in said), said
    assert f"installing llamacpp {TAG}: unpacking {CUDART_ARCHIVE} beside llama-server" in said


HOSTILE: dict[str, tuple[list[Member], str, str]] = {
    # (members after libcudart's, the folder they are under, what the refusal says)
    "a library of the build": ([file_member("cudart/libllama.so.0", b"\x7fELF")], "cudart",
                               "would replace 'libllama.so.0', a file of the build"),
    "the executable itself": ([file_member("llama-server", b"#!/bin/sh\n", 0o755)], "",
                              "would replace 'llama-server'"),
    "a link over a build's link": ([link_member("libggml.so.0", CUDART_FILE)], "",
                                   "would replace 'libggml.so.0'"),
    "a name that climbs out": ([file_member("cudart/../../evil")], "cudart", "would land outside"),
    "a link that climbs out": ([link_member("cudart/libcublas.so.12", "../../../../etc/passwd")], "cudart",
                               "points outside the install directory"),
    # inside the companion's own folder this points at its top; flattened beside llama-server, out of the build
    "a link out once flattened": ([link_member("cudart/libcublas.so.12", "../libcublas.so.12.8")], "cudart",
                                  "libcublas.so.12 -> ../libcublas.so.12.8 would point outside"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
async def test_a_companion_that_would_replace_or_leave_the_build_is_refused(
    case: str, tmp_path: Path, rel: Release, cuda_stubs: Stubs
) -> None:
    extra, top, words = HOSTILE[case]
    source = publish(rel, cuda_stubs, companion=cudart_archive(cuda_stubs, top=top, extra=extra))
    with pytest.raises(InstallRefused) as e:
        await install(context(tmp_path / "engines"), source, source.variants[0], lambda w: None)
    assert e.value.reason == "ArchiveUnsafe" and words in str(e.value), e.value
    assert list((tmp_path / "engines" / "llamacpp").iterdir()) == [], "nothing installed, no staging left"
    assert not (tmp_path / "evil").exists()
