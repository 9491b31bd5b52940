"""Members reached through the archive's own symlinks are refused: the kernel follows `L/../X` through L where
the text check normalises it away, so a link chain, a PATH_MAX path or a file named like an earlier link escapes."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from llmgw.agent.installs.recipes import install
from llmgw.agent.installs.unpack import check_members, unpack
from tests.agent.installs.fake_builds import fake_archive, fake_server_script
from tests.agent.installs.release import Release, release_server
from tests.agent.installs.test_install import context, publish

D = "d" * 240
FOUR = "/".join([D] * 4)


def _sym(tar: tarfile.TarFile, name: str, target: str) -> None:
    i = tarfile.TarInfo(name)
    i.type, i.linkname = tarfile.SYMTYPE, target
    tar.addfile(i)


def _dir(tar: tarfile.TarFile, name: str) -> None:
    i = tarfile.TarInfo(name)
    i.type, i.mode = tarfile.DIRTYPE, 0o755
    tar.addfile(i)


def _file(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    i = tarfile.TarInfo(name)
    i.size, i.mode = len(data), 0o755
    tar.addfile(i, io.BytesIO(data))


def dotdot_archive(up: int, outside: str, payload: bytes, levels: int = 6, t: int = 4) -> bytes:
    """Every name and link target <= 1024 bytes and <= 5 deep as text; `esc` really points at `up` levels above
    the unpack directory, then `outside`, and the last member writes `payload` through it."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        _dir(tar, FOUR)
        _sym(tar, "L1", FOUR)
        for k in range(2, levels + 1):  # L_k -> L_{k-1}/../D/D/D/D: three directories deeper each time
            _dir(tar, f"L{k-1}/../{FOUR}")
            _sym(tar, f"L{k}", f"L{k-1}/../{FOUR}")
        real = 4 + 3 * (levels - 1) - 1 + t  # 19 directories of 241 bytes: past PATH_MAX once resolved
        mdir = f"L{levels}/../" + "/".join([D] * t)  # really `real` deep; as text, t deep
        _dir(tar, mdir)
        _sym(tar, f"{mdir}/m1", "../" * t)
        n = 1
        while real - t * n + up > t + 1:  # m_n -> m_{n-1}/../../../..: really t levels higher each; as text "D"
            n += 1
            _sym(tar, f"{mdir}/m{n}", f"m{n-1}/" + "../" * t)
        u = real - t * n + up  # as text this stays inside: m_n/ plus at most t+1 '..'
        assert 0 <= u <= t + 1
        _sym(tar, "esc", f"{mdir}/m{n}/" + "../" * u + outside)
        _file(tar, "esc", payload)  # not "through" a link: it *is* one; open("wb") follows it
    return buf.getvalue()


def test_the_text_check_refuses_a_name_through_a_symlink_followed_by_dotdot() -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        _dir(tar, "a")
        _sym(tar, "a/x", "..")  # a/x is the top
        _file(tar, "a/x/../y", b"")  # the kernel writes <top>/../y; as text it is a/y
    buf.seek(0)
    with tarfile.open(fileobj=buf) as tar:
        members = tar.getmembers()
    refused = ""
    try:
        check_members(members)
    except Exception as e:
        refused = str(e)
    assert refused, "a member path through the archive's own symlink 'a/x' passed the check"


async def test_a_hostile_archive_cannot_rewrite_the_previous_builds_executable(tmp_path: Path) -> None:
    with release_server(Release()) as rel:
        ctx = context(tmp_path / "engines")
        b1 = publish(rel, "b1", fake_archive("b1", fake_server_script()))
        st = await install(ctx, b1, b1.variants[0], lambda w: None)
        server = Path(st.path)
        before = server.read_bytes()
        # from .staging-b2-cpu-x86_64, ".." is <root>/llamacpp
        b2 = publish(rel, "b2", dotdot_archive(1, "b1-cpu-x86_64/llama-b1/llama-server", b"#!/bin/sh\necho owned\n"))
        try:
            await install(ctx, b2, b2.variants[0], lambda w: None)
        except Exception as e:
            print("\nb2 refused as:", getattr(e, "reason", type(e).__name__), str(e)[:150])
        after = server.read_bytes()
        assert after == before, f"b2's archive rewrote b1's {server}: now {after!r}"


async def test_a_hostile_archive_cannot_write_outside_the_install_root(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("original\n")
    staging = tmp_path / "node" / "engines" / "llamacpp" / ".staging-b2-cpu-x86_64"
    staging.mkdir(parents=True)
    try:
        await unpack(_write(tmp_path, dotdot_archive(4, "victim.txt", b"owned\n")), staging, 1 << 30)
    except Exception as e:
        print("\nrefused as:", getattr(e, "reason", type(e).__name__), str(e)[:150])
    assert victim.read_text() == "original\n", f"{victim} written from inside the archive"


def _write(d: Path, data: bytes) -> Path:
    p = d / "a.tar.gz"
    p.write_bytes(data)
    return p
