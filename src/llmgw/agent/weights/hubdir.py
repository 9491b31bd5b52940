"""A hub model on this node's disk: `weights_dir/hub/<org>--<name>/<commit>/`, laid out as the repository is, each
file a link to the whole, verified file fetched for it (`fetched/…`, one per URL as for any source), and a
manifest. The directory takes its name only when every file is whole; a file removed to make room leaves the
directory not held (a link to nothing), never a directory that looks whole and is not."""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from llmgw.agent.weights import local
from llmgw.wire.hub import COMMIT, HubFile, file_url, parse_hub
from llmgw.wire.messages import WeightsPlan

MANIFEST = local.HUB_MANIFEST
MAX_DIRS = 256  # hub directories looked at per weights directory in a report


def dir_for(weights_dir: Path, source: str) -> Path:
    """Where a pinned hub source's directory lives (the hub's own cache spells a repository "org--name" too)."""
    ref = parse_hub(source)
    return weights_dir / local.HUB / ref.repo.replace("/", "--") / ref.revision


def pinned(source: str) -> bool:
    try:
        return COMMIT.fullmatch(parse_hub(source).revision) is not None
    except ValueError:
        return False


def target(weights_dir: Path, base_url: str, f: HubFile) -> Path:
    """The fetched file a directory's entry links to."""
    return local.target_for(weights_dir, file_url(base_url, f.path))


def targets(weights_dir: Path, plan: WeightsPlan | None) -> set[Path]:
    """Every fetched file a shard running from this plan's directory uses: none of them is removed for room."""
    if plan is None or not plan.base_url:
        return set()
    return {target(weights_dir, plan.base_url, f) for f in plan.files}


@dataclass(frozen=True)
class HeldDir:
    source: str
    path: Path
    files: tuple[HubFile, ...]


def read_dir(folder: Path) -> HeldDir | None:
    """The directory if every file it lists is there, whole, and the one its manifest describes; else None."""
    try:
        meta = json.loads((folder / MANIFEST).read_text())
        source, base_url = str(meta["source"]), str(meta["base_url"])
        files = tuple(HubFile.model_validate(f) for f in meta["files"])
        if folder != dir_for(folder.parents[2], source):
            return None  # a manifest copied or moved from elsewhere
    except (OSError, ValueError, KeyError, TypeError, IndexError, ValidationError):
        return None
    weights_dir = folder.parents[2]
    for f in files:
        want = target(weights_dir, base_url, f)
        held = local.read_held(want.parent)
        try:
            same = (folder / f.path).resolve(strict=True) == want.resolve(strict=True)
        except OSError:
            return None  # a link to nothing: the file was removed to make room
        if not same or held is None or held.size != f.size or (f.sha256 and held.sha256 != f.sha256):
            return None
    return HeldDir(source, folder, files)


def matches(held: HeldDir, plan: WeightsPlan) -> bool:
    return set(held.files) == set(plan.files)


def held_sources(dirs: Iterable[Path]) -> list[str]:
    """The pinned source of every whole hub directory under the weights directories."""
    out: set[str] = set()
    for d in dirs:
        folders = sorted(c for r in _entries(d / local.HUB) for c in _entries(r))[:MAX_DIRS]
        out.update(h.source for f in folders if (h := read_dir(f)) is not None)
    return sorted(out)


def _entries(folder: Path) -> list[Path]:
    """What a folder holds but dotted names; nothing when it is no folder (a stray file beside ours hides none)."""
    try:
        return [c for c in folder.iterdir() if not c.name.startswith(".")]
    except OSError:
        return []


def assemble(weights_dir: Path, source: str, plan: WeightsPlan) -> Path:
    """Lay the directory out under a temporary name and give it its own only once it is complete; a directory
    there before (a file of it removed since) is replaced. Every file must be fetched whole first."""
    final = dir_for(weights_dir, source)
    held = read_dir(final)
    if held is not None and matches(held, plan):
        return final  # whole again (a removed file fetched back under its links): never unmade while in use
    final.parent.mkdir(parents=True, exist_ok=True)
    for stale in final.parent.glob(f".{final.name}.*"):  # what a killed agent left half made
        shutil.rmtree(stale, ignore_errors=True)
    tmp = final.parent / f".{final.name}.{secrets.token_hex(4)}"
    tmp.mkdir()
    try:
        for f in plan.files:
            link = tmp / f.path
            link.parent.mkdir(parents=True, exist_ok=True)
            # relative: the directory stays whole where another machine mounts it under another path
            os.symlink(os.path.relpath(target(weights_dir, plan.base_url, f), (final / f.path).parent), link)
        manifest = {"source": source, "base_url": plan.base_url, "files": [f.model_dump() for f in plan.files]}
        # a file of its own: never through a link a plan put there (onto a fetched, verified file)
        fd = os.open(tmp / MANIFEST, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w") as out:
            json.dump(manifest, out, indent=1)
            out.flush()
            os.fsync(out.fileno())
        if final.exists() or final.is_symlink():
            old = final.parent / f".{final.name}.{secrets.token_hex(4)}"
            os.replace(final, old)
            shutil.rmtree(old, ignore_errors=True)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_dir(final.parent)
    return final


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
