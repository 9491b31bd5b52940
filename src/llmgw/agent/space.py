"""Whether a disk that was full has room again: a write that failed for want of space is tried again as soon as the
disk it failed on has SPACE_BACK more free than when it failed, not only when its back-off ends, so that a node
whose operator freed space resumes at once."""

from __future__ import annotations

import shutil
from pathlib import Path

SPACE_BACK = 16 * 1024 * 1024


def free_bytes(path: Path) -> int | None:
    """Free bytes on the file system holding `path` (its nearest existing parent); None if it cannot be read."""
    for p in (path, *path.parents):
        try:
            return shutil.disk_usage(p).free
        except OSError:
            continue
    return None


def room_again(path: Path, free_when_failed: int | None) -> bool:
    if free_when_failed is None:
        return False
    now = free_bytes(path)
    return now is not None and now >= free_when_failed + SPACE_BACK
