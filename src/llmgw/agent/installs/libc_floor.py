"""The C library an unpacked build needs, read from its own ELF files rather than from where it was said to be built.

Every dynamically linked ELF file carries the symbol versions it needs from each shared library (its `.gnu.version_r`
section), and the dynamic loader refuses to start it when the C library lacks one ("version `GLIBC_2.38' not
found"). The newest `GLIBC_x.y` any file of a build names is therefore the oldest glibc it runs on: often older than
the glibc of the distribution it was built on, never newer. A build that needs more than the node has is refused
with LibcTooOld and the file and version that say so, before anything of it is run.

The files come from a release archive that passed its digest and the unpacker's bounds; they are still parsed as
hostile: a file that is not ELF, or whose sections cannot be read, names no need (it is run, or not, by the probe).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elftools.common.exceptions import ELFError
from elftools.construct.core import ConstructError
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection

from llmgw.core.errors import InstallRefused
from llmgw.core.reasons import Reason

ELF_MAGIC = b"\x7fELF"
MAX_FILES = 20_000  # files looked at in one build (a llama.cpp archive has about 60; a Python environment more)
MAX_NEEDS = 4_096  # version needs read from one file (a real binary names tens)
_ELF: Any = ELFFile  # pyelftools' constructor and iterators are not annotated
_GLIBC = re.compile(r"GLIBC_(\d{1,3})\.(\d{1,3})(?:\.(\d{1,3}))?")


@dataclass(frozen=True, order=True)
class Need:
    version: tuple[int, ...]  # (2, 38)
    file: str  # the file that needs it, relative to the build's root

    @property
    def glibc(self) -> str:
        return ".".join(map(str, self.version))


def _numbers(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in version.split(".") if n.isdigit())


def versions_needed(path: Path) -> list[tuple[int, ...]]:
    """The GLIBC_ versions one ELF file needs (GLIBC_PRIVATE and other libraries' versions left out); [] for a file
    that is not ELF, is linked statically, or cannot be read."""
    try:
        with path.open("rb") as f:
            if f.read(4) != ELF_MAGIC:
                return []
            f.seek(0)
            elf: Any = _ELF(f)
            out: list[tuple[int, ...]] = []
            for section in elf.iter_sections():
                if not isinstance(section, GNUVerNeedSection):
                    continue
                needs: Any = section
                for n, (_, auxes) in enumerate(needs.iter_versions()):
                    for aux in auxes:
                        m = _GLIBC.fullmatch(str(aux.name))
                        if m:
                            out.append(tuple(int(g) for g in m.groups() if g is not None))
                    if n >= MAX_NEEDS:
                        break
            return out
    # pyelftools on a truncated or crafted file: its own errors, its vendored parser's, or what a bad offset gives
    except (OSError, ELFError, ConstructError, ValueError, KeyError, IndexError, AttributeError, UnicodeDecodeError,
            AssertionError, OverflowError, MemoryError):
        return []


def _files(root: Path) -> Iterator[Path]:
    seen = 0
    for path in sorted(root.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        seen += 1
        if seen > MAX_FILES:
            return
        yield path


def glibc_needed(root: Path) -> Need | None:
    """The newest glibc any ELF file under `root` needs, with the first file that needs it; None when none names
    one (a static build, or no ELF files at all)."""
    best: Need | None = None
    for path in _files(root):
        for version in versions_needed(path):
            need = Need(version, str(path.relative_to(root)))
            if best is None or need.version > best.version:
                best = need
    return best


def check(root: Path, node_glibc: str, what: str) -> Need | None:
    """Refuses (LibcTooOld) a build under `root` that needs a newer glibc than the node's; the need, if any. A node
    whose C library is not glibc, or was not read (""), is not judged here: its probe says whether it runs."""
    need = glibc_needed(root)
    if need is None or not node_glibc or _numbers(node_glibc) >= need.version:
        return need
    raise InstallRefused(Reason.LibcTooOld, f"{what} needs glibc {need.glibc} or newer: {need.file} names the "
                                            f"symbol version GLIBC_{need.glibc} and will not start; this node has "
                                            f"glibc {node_glibc}")


if __name__ == "__main__":  # `python -m llmgw.agent.installs.libc_floor DIR`: an unpacked archive's floor
    import sys

    for arg in sys.argv[1:]:
        found = glibc_needed(Path(arg))
        print(f"{arg}: " + (f"glibc {found.glibc} ({found.file})" if found else "names no glibc version"))
