"""Operating system, architecture and the disk that holds the weights."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

from llmgw.agent.discovery.hostroot import HostRoot
from llmgw.core.errors import DiscoveryError
from llmgw.wire.messages import Disk


def parse_os_release(text: str) -> str:
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep or key.strip().startswith("#"):
            continue
        try:
            # os-release values use shell quoting: NAME="Ubuntu", VERSION='22.04 "Jammy"'
            words = shlex.split(value)
        except ValueError:
            words = [value.strip().strip("\"'")]
        fields[key.strip()] = " ".join(words)
    if fields.get("PRETTY_NAME"):
        return fields["PRETTY_NAME"]
    return " ".join(v for v in (fields.get("NAME", ""), fields.get("VERSION", "")) if v)


def probe_os(root: HostRoot) -> str:
    # /etc/os-release is the standard place; /usr/lib/os-release is where it points on image-based systems
    for rel in ("etc/os-release", "usr/lib/os-release"):
        text = root.read_text(rel)
        if text is not None:
            return parse_os_release(text)
    return ""


def probe_arch(root: HostRoot, default_arch: str) -> str:
    """The host's architecture; the caller's default (platform.machine()) when the kernel does not expose it."""
    text = root.read_text("proc/sys/kernel/arch")
    arch = text.strip() if text is not None else ""
    return arch or default_arch


def probe_disk(weights_dir: Path | None) -> Disk | None:
    """Space on the file system holding the weights; None when no such directory exists (yet)."""
    if weights_dir is None:
        return None
    real = weights_dir.resolve()
    try:
        usage = shutil.disk_usage(real)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        raise DiscoveryError(f"cannot measure {real}: {e.strerror or e}") from None
    return Disk(path=str(real), total_bytes=usage.total, free_bytes=usage.free)


# where distributions keep the C library (Debian/Ubuntu by processor family, then Red Hat's and others' lib64)
LIBC_PATHS = ("lib/x86_64-linux-gnu/libc.so.6", "usr/lib/x86_64-linux-gnu/libc.so.6", "lib/aarch64-linux-gnu/libc.so.6",
              "usr/lib/aarch64-linux-gnu/libc.so.6", "lib64/libc.so.6", "usr/lib64/libc.so.6", "lib/libc.so.6")
LIBC_READ_MAX = 8 << 20  # glibc is about 2 MB; the banner is read from the file, never by running it
_BANNER = re.compile(rb"GNU C Library [^\n\0]{0,120}?release version ([0-9]\.[0-9]{1,3})")


# what each C library file said, by the file's identity: read again only when it is replaced (an upgrade of libc6
# renames a new file in), not on every heartbeat (glibc is about 2 MB)
_SEEN: dict[tuple[str, int, int, int], str] = {}
_SEEN_MAX = 64


def _banner_version(root: HostRoot, rel: str) -> str:
    p = root.path(rel)
    try:
        st = p.stat()
        key: tuple[str, int, int, int] | None = (str(p), st.st_ino, st.st_mtime_ns, st.st_size)
    except OSError:
        key = None  # read_bytes says whether that is absence or a fault
    if key is not None and key in _SEEN:
        return _SEEN[key]
    data = root.read_bytes(rel, LIBC_READ_MAX)
    m = _BANNER.search(data) if data else None
    version = m.group(1).decode() if m else ""
    if key is not None and data is not None:
        if len(_SEEN) >= _SEEN_MAX:
            _SEEN.clear()
        _SEEN[key] = version
    return version


def probe_glibc(root: HostRoot) -> str:
    """The C library's version ("2.39"), read from the banner glibc carries in itself; "" for another C library
    (musl) or none found: unknown is not "too old", and the engine's own library check decides then."""
    for rel in LIBC_PATHS:
        version = _banner_version(root, rel)
        if version:
            return version
    return ""
