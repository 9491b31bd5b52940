"""An archive whose links all stay inside as text but whose real path passes PATH_MAX (the tarfile `data` filter
bypass, CVE-2025-4517, on the Python this project runs on) writes nothing outside the install root."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

from llmgw.agent.installs.recipes import install
from tests.agent.installs.release import Release, release_server
from tests.agent.installs.test_install import context, good, publish

STEPS = "abcdefghijklmnop"
COMP = "d" * 247


def pathmax_archive(up: int, target: str, member: str, payload: bytes) -> bytes:
    """`escape` -> (a link that resolves to the top of the unpack dir) + `up` x '..' + target."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        path = ""
        for step in STEPS:
            d = tarfile.TarInfo(os.path.join(path, COMP))
            d.type, d.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(d)
            s = tarfile.TarInfo(os.path.join(path, step))
            s.type, s.linkname = tarfile.SYMTYPE, COMP  # a -> ddd...: inside
            tar.addfile(s)
            path = os.path.join(path, COMP)
        linkpath = os.path.join(*STEPS, "l" * 254)
        ll = tarfile.TarInfo(linkpath)
        ll.type, ll.linkname = tarfile.SYMTYPE, os.path.join(*[".."] * len(STEPS))  # back to the top: inside
        tar.addfile(ll)
        esc = tarfile.TarInfo("escape")
        esc.type = tarfile.SYMTYPE
        esc.linkname = os.path.join(linkpath, *[".."] * up, target)  # lexically inside; really `up` above dest
        tar.addfile(esc)
        f = tarfile.TarInfo("escape/" + member)
        f.size, f.mode = len(payload), 0o755
        tar.addfile(f, io.BytesIO(payload))
    return buf.getvalue()


async def test_a_pathmax_archive_cannot_replace_the_previous_builds_executable(tmp_path: Path) -> None:
    with release_server(Release()) as rel:
        ctx = context(tmp_path / "engines")
        b1 = publish(rel, "b1", good("b1"))
        st = await install(ctx, b1, b1.variants[0], lambda w: None)
        assert st.runs
        server = Path(st.path)
        before = server.read_bytes()
        # from .staging-b2-cpu-x86_64, one '..' is <root>/llamacpp
        b2 = publish(rel, "b2", pathmax_archive(1, "b1-cpu-x86_64/llama-b1", "llama-server",
                                                b"#!/bin/sh\necho owned\n"))
        try:
            await install(ctx, b2, b2.variants[0], lambda w: None)
        except Exception as e:
            print("\nb2 refused as:", getattr(e, "reason", type(e).__name__), str(e)[:150])
        after = server.read_bytes()
        assert after == before, f"b2's archive replaced b1's {server}: now {after!r}"


async def test_a_pathmax_archive_cannot_write_outside_the_install_root(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    with release_server(Release()) as rel:
        ctx = context(tmp_path / "node" / "engines")
        # 17 '..' reach "/" from the staging dir (lexically they only undo the 17 components before them)
        b2 = publish(rel, "b2", pathmax_archive(17, str(outside).lstrip("/"), "pwned", b"pwned\n"))
        try:
            await install(ctx, b2, b2.variants[0], lambda w: None)
        except Exception as e:
            print("\nrefused as:", getattr(e, "reason", type(e).__name__), str(e)[:150])
        hits = list(outside.iterdir())
        assert not hits, f"written OUTSIDE the install root: {hits}"
