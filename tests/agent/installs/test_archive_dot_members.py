"""An archive made the usual way from inside a folder (`tar -C dir -czf x.tgz .`) has a `.` member and every
name starts with `./`: it unpacks as if they were not there, while a `./..` or a `./x/../..` still climbs out."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from llmgw.agent.installs.unpack import check_members, unpack_here
from llmgw.core.errors import InstallRefused


def _tar_of_folder(tmp_path: Path) -> Path:
    """The real tar, run the way a person packs a build folder."""
    src = tmp_path / "build"
    (src / "bin").mkdir(parents=True)
    (src / "bin" / "llama-server").write_bytes(b"#!/bin/sh\n")
    (src / "bin" / "llama-server").chmod(0o755)
    (src / "libggml.so").write_bytes(b"lib")
    archive = tmp_path / "build.tgz"
    subprocess.run(["tar", "-C", str(src), "-czf", str(archive), "."], check=True)
    return archive


def test_an_archive_of_dot_unpacks(tmp_path: Path) -> None:
    archive = _tar_of_folder(tmp_path)
    with tarfile.open(archive) as tar:
        assert "." in tar.getnames() and "./bin/llama-server" in tar.getnames()
    dest = tmp_path / "out"
    dest.mkdir()
    unpack_here(archive, dest, 1 << 20)
    assert (dest / "bin" / "llama-server").read_bytes() == b"#!/bin/sh\n"
    assert (dest / "libggml.so").read_bytes() == b"lib"


def _members(*names: str) -> list[tarfile.TarInfo]:
    out = []
    for n in names:
        i = tarfile.TarInfo(n)
        i.type = tarfile.DIRTYPE if n.endswith("/") or n in (".", "./") else tarfile.REGTYPE
        out.append(i)
    return out


@pytest.mark.parametrize("name", ["./..", "./../x", "./a/../../x", "./..//x", "/.", "./../"])
def test_a_dot_member_still_cannot_climb_out(name: str) -> None:
    with pytest.raises(InstallRefused, match=r"outside the install directory|absolute path"):
        check_members(_members(".", name))


def test_dot_twice_is_not_a_duplicate_file() -> None:
    check_members(_members(".", "./", "./a", "a/"))  # directories may repeat; no file is written twice


def test_the_dot_member_cannot_be_a_file_or_link() -> None:
    i = tarfile.TarInfo(".")
    i.type, i.linkname = tarfile.SYMTYPE, "/etc"
    with pytest.raises(InstallRefused):
        check_members([i])
    f = tarfile.TarInfo("./")
    f.size = 3
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.addfile(f, io.BytesIO(b"abc"))
    with pytest.raises(InstallRefused):
        check_members([f])
