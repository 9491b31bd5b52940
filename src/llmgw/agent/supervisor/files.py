"""Files a shard leaves on its node: secrets only the agent's user reads, and logs whose last lines say why."""

from __future__ import annotations

import os
from pathlib import Path

LOG_TAIL_BYTES = 4096


def log_tail(path: Path, lines: int = 3, sep: str = " | ") -> str:
    """The last words a process wrote: the machine's own reason for an exit."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - LOG_TAIL_BYTES))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    kept = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return sep.join(kept[-lines:])


def write_private(path: Path, content: str) -> None:
    """Write a file only its owner can read, whole: a temp file beside it, then a rename."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, content.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
