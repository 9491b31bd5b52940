"""Weights on this node's disks: where a fetched file lives, what the node holds, the file systems under its
weights directories, and room made within a budget (the layout: docs/weights.md). A file under its final name is
whole and verified; a crash at any point leaves a description without its file, never a file described as another."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from llmgw.agent.supervisor.process import write_private
from llmgw.core.errors import WeightsRefused
from llmgw.core.reasons import Reason
from llmgw.core.units import mb
from llmgw.wire.messages import WeightsDir

FETCHED = "fetched"
HUB = "hub"  # hub models: a directory per commit, of links to the fetched files (hubdir.py)
HUB_MANIFEST = ".llmgw-hub.json"  # what marks such a directory (a leading dot: engines pass it by)
_LAYING_OUT = re.compile(r"^\.[0-9a-f]{40}\.[0-9a-f]{8}$")  # one being laid out, or replaced (hubdir.assemble)
SOURCE = ".source.json"  # a leading dot: no URL's file name can be it (file_name strips leading dots)
PART = ".part"
# file systems other machines mount too: never cleaned by one node, and a file there is held by every mounter
NETWORK_FS = frozenset({"nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "lustre", "gpfs", "beegfs",
                        "9p", "afs", "ocfs2", "gfs2", "virtiofs", "fuse.sshfs", "fuse.s3fs", "fuse.juicefs",
                        "fuse.gcsfuse", "fuse.rclone", "fuse.glusterfs", "fuse.cephfs", "fuse.mountpoint-s3"})
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def folder_for(weights_dir: Path, url: str) -> Path:
    """The folder a URL's file lives in: readable, and unique to the URL."""
    base = file_name(url)
    return weights_dir / FETCHED / f"{Path(base).stem[:60]}-{hashlib.sha256(url.encode()).hexdigest()[:16]}"


def file_name(url: str) -> str:
    """The URL's last path segment as a safe file name ("model.gguf"); "weights" when it has none."""
    last = unquote(urlparse(url).path).rsplit("/", 1)[-1]
    name = _UNSAFE.sub("_", last)[:120].lstrip(".")
    if name.endswith(PART):
        name += "_"  # a whole file never looks like one arriving
    return name or "weights"


def target_for(weights_dir: Path, url: str) -> Path:
    return folder_for(weights_dir, url) / file_name(url)


@dataclass(frozen=True)
class Held:
    url: str
    path: Path
    size: int
    sha256: str
    last_used: float
    part_of: str = ""  # the hub source whose directory it belongs to: reported as that, not on its own


def read_held(folder: Path) -> Held | None:
    """The whole file a fetched folder holds, or None (still arriving, or never finished)."""
    try:
        meta = json.loads((folder / SOURCE).read_text())
        url, size, digest = str(meta["url"]), int(meta["size"]), str(meta.get("sha256", ""))
        part_of = str(meta.get("part_of", ""))
        path = folder / file_name(url)
        st = path.stat()
        used = (folder / SOURCE).stat().st_mtime
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if folder != folder_for(folder.parent.parent, url) or st.st_size != size or (size == 0 and not part_of):
        return None  # a file changed under it, or a folder not made for this URL (a model's file may be empty)
    return Held(url, path, size, digest, used, part_of)


def held_files(weights_dir: Path) -> list[Held]:
    try:
        folders = sorted((weights_dir / FETCHED).iterdir())
    except OSError:
        return []
    return [h for f in folders if (h := read_held(f)) is not None]


def record(folder: Path, url: str, size: int, sha256: str, part_of: str = "") -> None:
    """What the file is, written (atomically) before the file takes its name."""
    meta: dict[str, str | int] = {"url": url, "size": size, "sha256": sha256}
    if part_of:
        meta["part_of"] = part_of
    write_private(folder / SOURCE, json.dumps(meta, indent=1) + "\n")


def touch(folder: Path) -> None:
    """A shard uses this file now."""
    try:
        os.utime(folder / SOURCE)
    except OSError:
        pass


def visible(dirs: Iterable[Path]) -> list[str]:
    """What this node holds: every fetched file by the URL it came from (first, so that a report cut to its
    bound never drops them), then every non-empty file under the directories by its path (an empty one looks
    like a download that never finished, a `.part` is one). A hub model's files are neither: its directory is
    reported by its source, whole (hubdir.held_sources)."""
    urls: set[str] = set()
    out: set[str] = set()
    for d in dirs:
        if not d.is_dir():
            continue
        urls.update(h.url for h in held_files(d) if not h.part_of)
        for root, subdirs, files in os.walk(d):
            # fetched files are reported by URL, a hub directory of ours by its source; an operator's own files
            # (a hub cache of theirs, say) by their paths
            subdirs[:] = [s for s in subdirs if not (s == FETCHED and Path(root) == d) and not _laid_out(root, s)]
            for f in files:
                if f.endswith(PART):
                    continue
                p = os.path.join(root, f)
                try:
                    if os.path.getsize(p) > 0:
                        out.add(p)
                except OSError:
                    continue
    return sorted(urls) + sorted(out)


def _laid_out(root: str, name: str) -> bool:
    return _LAYING_OUT.match(name) is not None or os.path.exists(os.path.join(root, name, HUB_MANIFEST))


def mount_of(path: Path, mountinfo: str) -> tuple[str, str]:
    """(mount point, file system type) of the mount holding `path`, from /proc/self/mountinfo's text."""
    real = str(path.resolve())
    best, fs = "", ""
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if not sep or len(fields) < 5 or not rest:
            continue
        point = fields[4].replace("\\040", " ")
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, fs = point, rest[0]
    return best, fs


def describe_dir(path: Path, mountinfo: str, budget: int | None, managed: int) -> WeightsDir:
    _, fs = mount_of(path, mountinfo) if mountinfo else ("", "")
    try:
        usage = shutil.disk_usage(path)
        total, free = usage.total, usage.free
    except OSError:
        total = free = 0
    return WeightsDir(path=str(path), fs_type=fs, network=fs in NETWORK_FS, total_bytes=total, free_bytes=free,
                      managed_bytes=managed, budget_bytes=budget)


def managed_bytes(weights_dir: Path) -> int:
    """Bytes llmgw fetched into the directory, whole or arriving."""
    total = 0
    for root, _, files in os.walk(weights_dir / FETCHED):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                continue
    return total


def _committed(weights_dir: Path, arriving: Mapping[Path, int]) -> tuple[int, int]:
    """(bytes fetched into the directory, each file still arriving counted at its whole size; bytes those files
    have yet to write), read in one walk: a transfer writing meanwhile moves bytes from one to the other, never
    into both."""
    total = 0
    seen: dict[Path, int] = {}
    for root, _, files in os.walk(weights_dir / FETCHED):
        for f in files:
            p = Path(root) / f
            try:
                size = p.stat().st_size
            except OSError:
                continue
            if p in arriving:
                seen[p] = size
            total += size
    to_come = sum(max(0, whole - seen.get(p, 0)) for p, whole in arriving.items())
    return total + to_come, to_come


def make_room(weights_dir: Path, need: int, budget: int | None, in_use: set[Path], network: bool,
              arriving: Mapping[Path, int] | None = None) -> list[str]:
    """Remove least recently used fetched files no shard uses until `need` more bytes fit on the disk and within
    the budget, beside what other transfers still have to write (`arriving`: their `.part` files and the whole
    size of each); the names removed. Raises InsufficientDisk, in the node's words, when they cannot be made to
    fit. Nothing is removed from a network file system: other nodes may be using it."""
    removed: list[str] = []
    arriving = arriving or {}

    def short() -> tuple[int, int]:
        free = shutil.disk_usage(weights_dir).free
        committed, to_come = _committed(weights_dir, arriving)
        over = committed + need - budget if budget is not None else 0
        return max(0, need + to_come - free), max(0, over)

    lacking, over = short()
    if (lacking or over) and not network:
        for h in sorted(held_files(weights_dir), key=lambda h: h.last_used):
            if h.path in in_use or h.path.parent in {p.parent for p in in_use}:
                continue
            shutil.rmtree(h.path.parent, ignore_errors=True)
            removed.append(h.path.name)
            lacking, over = short()
            if not lacking and not over:
                break
    if lacking:
        free = shutil.disk_usage(weights_dir).free
        raise WeightsRefused(Reason.InsufficientDisk, f"needs {mb(need + _committed(weights_dir, arriving)[1])}, "
                             f"{mb(free)} free on {weights_dir}")
    if over:
        assert budget is not None
        left = max(0, budget - _committed(weights_dir, arriving)[0])
        raise WeightsRefused(Reason.InsufficientDisk, f"needs {mb(need)}; the weights budget of {mb(budget)} on "
                             f"{weights_dir} has {mb(left)} left and the files in it are in use")
    return removed
