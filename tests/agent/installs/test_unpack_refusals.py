"""Archives and names from the wire that the installer refuses: links and long names that climb out, huge declared
sizes, and names or versions that would make paths."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import ValidationError

from llmgw.agent.installs.installer import Installer
from llmgw.agent.installs.unpack import unpack_here
from llmgw.core.errors import InstallRefused
from llmgw.wire.engines import EngineSource, EngineVariant
from tests.agent.installs.archives import dir_member, file_member, link_member, only
from tests.agent.installs.release import Release, release_server
from tests.agent.installs.test_install import attempt, context, publish, tree


def _tar(build: Callable[[tarfile.TarFile], None]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        build(tar)
    return buf.getvalue()


def _refused(tmp_path: Path, data: bytes) -> InstallRefused:
    a = tmp_path / "x.tar.gz"
    a.write_bytes(data)
    dest = tmp_path / "a" / "b" / "dest"
    dest.mkdir(parents=True)
    before = tree(tmp_path)
    with pytest.raises(InstallRefused) as e:
        unpack_here(a, dest, 1 << 30)
    after = {k for k in tree(tmp_path) if not k.startswith("a/b/dest")}
    assert after <= set(before), after
    return e.value


def test_a_self_link_chain_lexically_inside_is_caught_by_the_filter(tmp_path: Path) -> None:
    # a -> . ; a/a/a/b -> ../../../c reads as "c" lexically, really three levels above dest
    e = _refused(tmp_path, only(link_member("a", "."), link_member("a/a/a/b", "../../../c"), file_member("a/a/a/b/x")))
    assert e.reason == "ArchiveUnsafe", e


def test_a_gnu_long_name_that_climbs_out_is_refused(tmp_path: Path) -> None:
    def build(tar: tarfile.TarFile) -> None:
        i = tarfile.TarInfo("x" * 200 + "/" + "../" * 3 + "evil")
        tar.addfile(i, io.BytesIO(b""))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.GNU_FORMAT) as tar:
        build(tar)
    assert "outside" in str(_refused(tmp_path, buf.getvalue()))


def test_a_pax_path_that_is_absolute_is_refused(tmp_path: Path) -> None:
    def build(tar: tarfile.TarFile) -> None:
        i = tarfile.TarInfo("ok")
        i.pax_headers = {"path": "/tmp/llmgw-attack-evil"}
        tar.addfile(i, io.BytesIO(b""))
    assert "absolute" in str(_refused(tmp_path, _tar(build)))
    assert not Path("/tmp/llmgw-attack-evil").exists()


def test_a_hardlink_through_an_inside_symlink_to_outside_is_refused(tmp_path: Path) -> None:
    e = _refused(tmp_path, only(dir_member("d"), link_member("d/up", ".."), link_member("h", "d/up/../x", hard=True)))
    assert e.reason == "ArchiveUnsafe"


def test_a_declared_huge_sparse_or_regular_size_is_refused_before_writing(tmp_path: Path) -> None:
    def build(tar: tarfile.TarFile) -> None:
        i = tarfile.TarInfo("big")
        i.pax_headers = {"size": str(1 << 40)}
        tar.addfile(i, io.BytesIO(b""))
    e = _refused(tmp_path, _tar(build))
    assert e.reason == "ArchiveUnsafe", e


def test_names_and_versions_from_the_wire_cannot_make_paths() -> None:
    for bad in ("../x", "b1\n", "b1/..", ".hidden", "-x", "a" * 65):
        with pytest.raises(ValidationError):
            EngineSource(name="llamacpp", version=bad)
    with pytest.raises(ValidationError):
        EngineVariant(variant="cpu-x86_64/../..", url="http://x/a.tar.gz", sha256="0" * 64)
    with pytest.raises(ValidationError):
        EngineVariant(variant="cpu-x86_64", packages=["-o=APT::Foo"])
    with pytest.raises(ValidationError):
        EngineVariant(variant="cpu-x86_64", url="file:///etc/passwd", sha256="0" * 64)


async def test_a_url_whose_name_is_dot_dot_fails_without_writing_outside(tmp_path: Path) -> None:
    with release_server(Release()) as rel:
        src = publish(rel, "b1", b"x")
        src = src.model_copy(update={"variants": [src.variants[0].model_copy(update={"url": rel.url("..")})]})
        root = tmp_path / "engines"
        before = set(tree(tmp_path))
        e = await attempt(context(root), src)
        print("\n", e.reason, e)
        new = set(tree(tmp_path)) - before
        assert all(k == "engines" or k.startswith("engines/") for k in new), new


async def test_an_unknown_engine_name_from_the_wire_is_never_a_path(tmp_path: Path) -> None:
    inst = Installer(context(tmp_path / "engines"))
    await inst.converge([EngineSource(name="../../x", version="1")], __import__(
        "tests.agent.installs.test_installer", fromlist=["X86"]).X86, set())
    assert not (tmp_path / "x").exists() and inst.statuses()[0].reason == "EngineInstallFailed"
    assert json.loads((tmp_path / "engines" / "wanted.json").read_text())[0]["name"] == "../../x"
