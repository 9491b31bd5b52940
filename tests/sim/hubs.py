"""Stand-in hub helpers for tests: a sample model's repository served in-process, and digests of files on disk."""

from __future__ import annotations

import hashlib
from pathlib import Path

from llmgw.sim.hub_repo import git_blob_sha1

__all__ = ["REPO", "TOKEN", "digests", "sha256_of"]

REPO = "acme/tiny-llama"
TOKEN = "hf_standin_token_0123456789"
SMALL_LFS = 64 * 1024  # files at least this big are LFS in these tests (the hub's default is 1 MiB)


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def digests(root: Path) -> dict[str, tuple[int, str, str]]:
    """Every file under `root`: (size, sha256, git blob sha1), by its path relative to `root`."""
    out = {}
    for f in sorted(root.rglob("*")):
        if f.is_file():
            data = f.read_bytes()
            out[f.relative_to(root).as_posix()] = (len(data), hashlib.sha256(data).hexdigest(), git_blob_sha1(data))
    return out
