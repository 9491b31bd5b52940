"""Unpack a release archive into a directory of its own, refusing any member that would land outside it.

Two passes. First every member is read and refused, in our words, if its name is absolute or climbs out with `..`,
if it is a link whose target is absolute or climbs out, if it is a device, FIFO or other special file, or if it
carries a setuid or setgid bit: an engine build has none of these, so one means the archive is not what it claims.
Then the members are extracted through the standard library's `data` filter, which resolves every path against
what is already on disk: a chain of links that each look harmless alone (a/b -> .., then a/b/c -> ..) is caught
there, as it forms.
"""

from __future__ import annotations

import posixpath
import stat
import tarfile
from pathlib import Path

from llmgw.core.errors import InstallRefused
from llmgw.core.reasons import Reason

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.xz", ".tar.bz2", ".tar")
MAX_MEMBERS = 100_000


def _inside(path: str) -> bool:
    """A relative path that stays below its root, read lexically."""
    norm = posixpath.normpath(path)
    return not norm.startswith("/") and norm != ".." and not norm.startswith("../")


def _refusal(m: tarfile.TarInfo) -> str:
    name = m.name
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        return f"member {name!r} has an absolute path"
    if not _inside(name):
        return f"member {name!r} would land outside the install directory"
    if m.isdev() or m.isfifo() or not (m.isfile() or m.isdir() or m.issym() or m.islnk()):
        return f"member {name!r} is a device or special file"
    if m.mode & (stat.S_ISUID | stat.S_ISGID):
        return f"member {name!r} is setuid or setgid"
    if m.issym():
        if m.linkname.startswith("/"):
            return f"symlink {name!r} points to an absolute path ({m.linkname})"
        if not _inside(posixpath.join(posixpath.dirname(name), m.linkname)):
            return f"symlink {name!r} points outside the install directory ({m.linkname})"
    if m.islnk() and (m.linkname.startswith("/") or not _inside(m.linkname)):
        return f"hardlink {name!r} points outside the install directory ({m.linkname})"
    return ""


def check_members(members: list[tarfile.TarInfo]) -> None:
    if len(members) > MAX_MEMBERS:
        raise InstallRefused(Reason.ArchiveUnsafe, f"archive has {len(members)} members, more than {MAX_MEMBERS}")
    for m in members:
        why = _refusal(m)
        if why:
            raise InstallRefused(Reason.ArchiveUnsafe, f"archive refused: {why}")


def unpack(archive: Path, dest: Path, max_bytes: int) -> None:
    """Into `dest` (made empty first by the caller). Raises InstallRefused; the caller removes `dest` then."""
    if not archive.name.endswith(ARCHIVE_SUFFIXES):
        raise InstallRefused(Reason.ArchiveUnsafe,
                             f"{archive.name}: not a tar archive (expected {', '.join(ARCHIVE_SUFFIXES)})")
    try:
        with tarfile.open(archive) as tar:
            members = tar.getmembers()
            check_members(members)
            size = sum(m.size for m in members if m.isfile())
            if size > max_bytes:
                raise InstallRefused(Reason.ArchiveUnsafe,
                                     f"archive unpacks to {size} bytes, more than the {max_bytes} allowed")
            for m in members:
                tar.extract(m, dest, filter="data")
    except tarfile.FilterError as e:
        raise InstallRefused(Reason.ArchiveUnsafe, f"archive refused: {e}") from None
    except (tarfile.TarError, EOFError) as e:
        raise InstallRefused(Reason.ArchiveUnsafe, f"{archive.name} is not a readable archive: {e}") from None
    except OSError as e:
        code = Reason.DiskFull if e.errno == 28 else Reason.ArchiveUnsafe
        raise InstallRefused(code, f"unpacking {archive.name} failed: {e.strerror or e}") from None


def find_executable(root: Path, name: str) -> Path | None:
    """The shallowest regular, executable file called `name` under root (archives put builds one folder down)."""
    found = sorted(
        (p for p in root.rglob(name) if p.is_file() and not p.is_symlink() and p.stat().st_mode & stat.S_IXUSR),
        key=lambda p: (len(p.relative_to(root).parts), str(p)),
    )
    return found[0] if found else None
