"""A build's runtime companion: a second archive of shared libraries (llama.cpp's CUDA builds come with one holding
libcudart and libcublas, for nodes without a CUDA toolkit), unpacked under the same rules as the build into a place
of its own, then moved beside the executable. One top folder is flattened away; nothing may replace a file of the
build, and no link may point out of the folder it lands in."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from llmgw.agent.installs.unpack import link_target, unpack
from llmgw.core.errors import InstallRefused
from llmgw.core.reasons import Reason

UNPACKED = ".runtime-unpacked"  # inside the attempt's staging directory: it goes with it, whatever happens


def _root(d: Path) -> Path:
    """The folder the libraries are in: the archive's one top folder, if that is all it holds."""
    entries = list(d.iterdir())
    if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink():
        return entries[0]
    return d


def _escaping_link(root: Path) -> str:
    """The first symlink under `root` whose target, read as text, leaves `root` (the archive's own rule, applied
    again from the folder the libraries land in); "" when none does."""
    for dirpath, dirs, files in os.walk(root):
        for n in dirs + files:
            p = Path(dirpath) / n
            if p.is_symlink() and link_target(list(p.relative_to(root).parts), os.readlink(p)) is None:
                return f"{p.relative_to(root)} -> {os.readlink(p)}"
    return ""


def place_beside(unpacked: Path, dest: Path, name: str, reserved: frozenset[str] = frozenset()) -> list[str]:
    """Move what `unpacked` holds (under its one top folder, if any) into `dest`, the executable's folder; the
    names moved. Everything is checked before anything moves: a name `dest` already has (a file of the build), one
    of `reserved`, or a link out of `dest` refuses the lot (ArchiveUnsafe)."""
    root = _root(unpacked)
    entries = sorted(p for p in root.iterdir())
    taken = [p.name for p in entries if os.path.lexists(dest / p.name) or p.name in reserved]
    if taken:
        raise InstallRefused(Reason.ArchiveUnsafe, f"{name} refused: it would replace {taken[0]!r}, a file of the "
                             "build it comes with")
    out = _escaping_link(root)
    if out:
        raise InstallRefused(Reason.ArchiveUnsafe, f"{name} refused: its symlink {out} would point outside the "
                             "folder its libraries go to")
    for p in entries:
        os.rename(p, dest / p.name)  # one file system: the staging directory holds both
    shutil.rmtree(unpacked, ignore_errors=True)
    return [p.name for p in entries]


async def unpack_beside(archive: Path, name: str, staging: Path, exe_dir: Path, max_bytes: int,
                        reserved: frozenset[str] = frozenset()) -> list[str]:
    """Unpack the companion `archive` (called `name` in words) under `staging` and place it in `exe_dir`; the names
    placed."""
    unpacked = staging / UNPACKED
    unpacked.mkdir()
    await unpack(archive, unpacked, max_bytes)
    return place_beside(unpacked, exe_dir, name, reserved | {UNPACKED})
