"""Unpack a release archive into a directory of its own, refusing any member that would land outside it.
Every member is checked before anything is written (docs/engines.md lists the refusals); no path may pass through a
link the archive makes, so each path means on disk what it says as text. Read in a child process with time and
memory limits: a hostile tar header can make the parser loop or allocate without end."""

from __future__ import annotations

import json
import os
import resource
import stat
import sys
import tarfile
from pathlib import Path

from llmgw.core.errors import InstallRefused
from llmgw.core.reasons import Reason

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.xz", ".tar.bz2", ".tar")
MAX_MEMBERS = 100_000
MAX_NAME = 1024  # bytes of a member name or link target: real builds use a few dozen
MAX_DEPTH = 32
CHILD_MEMORY = 1 << 30
CHILD_SECONDS = 1800


def _parts(name: str) -> list[str] | None:
    """A member name as its parts, `./` and `.` dropped; None if it is absolute or has a `..` anywhere (a real
    build never has one, and a name through `..` is read differently by text and by the kernel)."""
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        return None
    parts = [p for p in name.split("/") if p not in ("", ".")]
    return None if ".." in parts else parts


def link_target(member: list[str], linkname: str) -> list[str] | None:
    """Where a symlink at `member` points, as parts from the top; None if it leaves it. `..` only leading: a link
    climbs first and then descends, so no step of it goes through a link and comes back."""
    if linkname.startswith("/"):
        return None
    parts = [p for p in linkname.split("/") if p not in ("", ".")]
    up = 0
    while up < len(parts) and parts[up] == "..":
        up += 1
    rest = parts[up:]
    here = member[:-1]
    if ".." in rest or up > len(here) or not (here[: len(here) - up] + rest):
        return None
    return here[: len(here) - up] + rest


def _through(parts: list[str], links: set[str]) -> str | None:
    """The first proper ancestor of `parts` that is one of the archive's own symlinks."""
    return next((p for i in range(1, len(parts)) if (p := "/".join(parts[:i])) in links), None)


def _refusal(m: tarfile.TarInfo, links: set[str], files: set[str]) -> str:
    name = m.name
    if len(name.encode()) > MAX_NAME or len(m.linkname.encode()) > MAX_NAME:
        return f"member {name[:80]!r}… has a name or link target longer than {MAX_NAME} bytes"
    parts = _parts(name)
    if parts == [] and m.isdir() and not name.startswith("/"):
        return ""  # `.` or `./`: the install directory itself, as `tar -C dir -czf x.tgz .` writes it
    if parts is None or not parts:
        why = "has an absolute path" if name.startswith("/") or name[1:2] == ":" else (
            "would land outside the install directory" if parts is None else "has no name")
        return f"member {name!r} {why}"
    if len(parts) > MAX_DEPTH:
        return f"member {name!r} is nested deeper than {MAX_DEPTH} directories"
    if m.isdev() or m.isfifo() or not (m.isfile() or m.isdir() or m.issym() or m.islnk()):
        return f"member {name!r} is a device or special file"
    if m.mode & (stat.S_ISUID | stat.S_ISGID):
        return f"member {name!r} is setuid or setgid"
    via = _through(parts, links)
    if via is not None:
        return f"member {name!r} lies through the archive's own symlink {via!r}"
    if m.issym():
        if m.linkname.startswith("/"):
            return f"symlink {name!r} points to an absolute path ({m.linkname})"
        target = link_target(parts, m.linkname)
        if target is None:
            return f"symlink {name!r} points outside the install directory ({m.linkname})"
        via = _through(target, links)
        if via is not None:
            return f"symlink {name!r} points through the archive's own symlink {via!r} ({m.linkname})"
    if m.islnk():
        target_parts = _parts(m.linkname)
        if target_parts is None or "/".join(target_parts) not in files:
            return f"hardlink {name!r} points outside the install directory, or not at a file before it ({m.linkname})"
    return ""


def check_members(members: list[tarfile.TarInfo]) -> None:
    """Raises InstallRefused for the first member that could write anywhere but where its name says."""
    if len(members) > MAX_MEMBERS:
        raise InstallRefused(Reason.ArchiveUnsafe, f"archive has more than {MAX_MEMBERS} members")
    links = {"/".join(p) for m in members if m.issym() and (p := _parts(m.name))}
    seen: set[str] = set()
    files: set[str] = set()
    for m in members:
        why = _refusal(m, links, files)
        key = "/".join(_parts(m.name) or [m.name])
        if not why and key in seen and not m.isdir():
            why = f"member {m.name!r} comes twice (a later one would replace, or write through, the first)"
        if why:
            raise InstallRefused(Reason.ArchiveUnsafe, f"archive refused: {why}")
        seen.add(key)
        if m.isfile():
            files.add(key)


def _read_members(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    """One at a time, stopping at the limit: getmembers() would read a million-member archive whole first."""
    out = []
    for m in tar:
        out.append(m)
        if len(out) > MAX_MEMBERS:
            break
    return out


# tarfile's extraction filters came with Python 3.11.4 (PEP 706); Debian 12's 3.11.2 has none. Every member is checked
# by check_members() before anything is written, so the filter is a second line where there is one, never the first.
_FILTER: dict[str, str] = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
_FILTER_ERRORS: tuple[type[Exception], ...] = (tarfile.FilterError,) if hasattr(tarfile, "FilterError") else ()


def unpack_here(archive: Path, dest: Path, max_bytes: int) -> None:
    """Into `dest` (made empty by the caller), in this process. Raises InstallRefused."""
    if not archive.name.endswith(ARCHIVE_SUFFIXES):
        raise InstallRefused(Reason.ArchiveUnsafe,
                             f"{archive.name}: not a tar archive (expected {', '.join(ARCHIVE_SUFFIXES)})")
    try:
        with tarfile.open(archive) as tar:
            members = _read_members(tar)
            check_members(members)
            by_name = {"/".join(_parts(m.name) or []): m.size for m in members if m.isfile()}
            size = sum(m.size for m in members if m.isfile()) + sum(
                by_name.get("/".join(_parts(m.linkname) or []), 0) for m in members if m.islnk())
            if size > max_bytes:
                raise InstallRefused(Reason.ArchiveUnsafe,
                                     f"archive unpacks to {size} bytes, more than the {max_bytes} allowed")
            for m in members:
                tar.extract(m, dest, **_FILTER)  # type: ignore[arg-type]
    except _FILTER_ERRORS as e:
        raise InstallRefused(Reason.ArchiveUnsafe, f"archive refused: {e}") from None
    except (tarfile.TarError, EOFError, ValueError) as e:
        raise InstallRefused(Reason.ArchiveUnsafe, f"{archive.name} is not a readable archive: {e}") from None
    except OSError as e:
        raise InstallRefused.from_os(e, f"unpacking {archive.name} failed") from None


async def unpack(archive: Path, dest: Path, max_bytes: int, seconds: float = CHILD_SECONDS) -> None:
    """unpack_here in a child process bounded in time and memory; its refusal comes back as ours."""
    from llmgw.agent.installs.probe import run

    r = await run([sys.executable, "-m", "llmgw.agent.installs.unpack", str(archive), str(dest), str(max_bytes)],
                  timeout=seconds)
    if r.code == 0:
        return
    try:
        verdict = json.loads(r.output.strip().splitlines()[-1])
        raise InstallRefused(str(verdict["reason"]), str(verdict["message"])[:1800])
    except (ValueError, KeyError, IndexError, TypeError):
        pass
    if r.code == 124:  # slow is not unsafe: the archive is kept for the next attempt
        raise InstallRefused(Reason.EngineInstallFailed, f"reading {archive.name} took longer than {seconds:.0f} s")
    else:
        words = f"reading {archive.name} failed (exit {r.code}, past the {CHILD_MEMORY >> 20} MiB allowed?)"
        raise InstallRefused(Reason.ArchiveUnsafe, words)


def find_executable(root: Path, name: str) -> Path | None:
    """The shallowest regular, executable file called `name` under root (archives put builds one folder down)."""
    found = sorted(
        (p for p in root.rglob(name) if p.is_file() and not p.is_symlink() and p.stat().st_mode & stat.S_IXUSR),
        key=lambda p: (len(p.relative_to(root).parts), str(p)),
    )
    return found[0] if found else None


def _main(argv: list[str]) -> int:
    resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY, CHILD_MEMORY))
    os.nice(5)
    try:
        unpack_here(Path(argv[0]), Path(argv[1]), int(argv[2]))
    except InstallRefused as e:
        print(json.dumps({"reason": e.reason, "message": str(e)}))
        return 1
    except MemoryError:
        print(json.dumps({"reason": Reason.ArchiveUnsafe, "message": "reading the archive needed more memory than "
                          f"the {CHILD_MEMORY >> 20} MiB allowed"}))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
