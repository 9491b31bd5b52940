"""HostRoot: every probe reads the machine through one of these, so tests can point it at a fixture tree."""

from __future__ import annotations

import errno
import re
from pathlib import Path

from llmgw.core.errors import DiscoveryError

# sysfs answers EINVAL/ENODEV/ENXIO for attributes that exist but have no value now (the `rate` of a port that is
# down, a device being removed); to a probe that is the same as "absent", not a failure.
_NO_VALUE = {errno.ENOENT, errno.ENOTDIR, errno.EINVAL, errno.ENODEV, errno.ENXIO}


def _unless_absent(p: Path, e: OSError) -> None:
    """A read that failed because the file is not there passes (its caller answers None); any other failure is
    DiscoveryError."""
    if e.errno not in _NO_VALUE and not isinstance(e, IsADirectoryError):
        raise DiscoveryError(f"cannot read {p}: {e.strerror or e}") from None


def natural_key(name: str) -> list[int | str]:
    """Sort key putting mlx5_2 before mlx5_10, as a person would."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


class HostRoot:
    """A read-only view of a host's /proc, /sys and /etc under `base` ("/" on a real node)."""

    def __init__(self, base: Path | str = "/") -> None:
        self.base = Path(base)

    def __repr__(self) -> str:
        return f"HostRoot({str(self.base)!r})"

    def path(self, rel: str) -> Path:
        # Callers write host paths ("/proc/meminfo" or "proc/meminfo"); both mean the same file under base.
        return self.base / rel.lstrip("/")

    def read_text(self, rel: str) -> str | None:
        """The file's text, or None when it is absent. Other failures (permissions) raise DiscoveryError."""
        p = self.path(rel)
        try:
            return p.read_text(encoding="utf-8", errors="replace")
        except OSError as e:
            _unless_absent(p, e)
            return None

    def read_bytes(self, rel: str, limit: int) -> bytes | None:
        """Up to `limit` bytes of the file (a link is followed, as on the host), or None when it is absent."""
        p = self.path(rel)
        try:
            with p.open("rb") as f:
                return f.read(limit)
        except OSError as e:
            _unless_absent(p, e)
            return None

    def listdir(self, rel: str) -> list[str]:
        """Entry names in natural order; an absent directory has none."""
        p = self.path(rel)
        try:
            names = [entry.name for entry in p.iterdir()]
        except OSError as e:
            if e.errno in _NO_VALUE:
                return []
            raise DiscoveryError(f"cannot list {p}: {e.strerror or e}") from None
        return sorted(names, key=natural_key)

    def exists(self, rel: str) -> bool:
        return self.path(rel).exists()
