"""The stand-in hub's repositories: commits of files (on disk or in memory), refs, and the faults a test switches on.

A commit id is the sha1 of its parent's id and its sorted (path, git blob id) list, so one directory always gives
the same commit. A file is in large-file storage (LFS) when its suffix is one the hub's default .gitattributes
tracks or it is at least `lfs_threshold` bytes; its git blob is then the LFS pointer, and the hub gives its sha256.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from llmgw.wire.hub import COMMIT, MAX_FILES, valid_path

LFS_THRESHOLD = 1 << 20
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack", ".onnx", ".ot", ".model")
CHUNK = 1 << 18


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


@dataclass(frozen=True)
class Blob:
    """One file's content (a path on disk or bytes) with the digests the hub tells about it."""

    source: Path | bytes
    size: int
    git_sha1: str  # of the content, or of the LFS pointer when `lfs`
    sha256: str
    lfs: bool

    @classmethod
    def of(cls, source: Path | bytes, lfs_threshold: int, name: str) -> Blob:
        size, sha1, sha256 = _digests(source)
        lfs = size >= lfs_threshold or name.endswith(LFS_SUFFIXES)
        if lfs:
            sha1 = git_blob_sha1(lfs_pointer(sha256, size))
        return cls(source, size, sha1, sha256, lfs)

    @property
    def pointer_size(self) -> int:
        return len(lfs_pointer(self.sha256, self.size))

    def chunks(self, start: int, end: int) -> Iterator[bytes]:
        """The content from `start` up to `end` (exclusive), a chunk at a time."""
        if isinstance(self.source, bytes):
            for at in range(start, end, CHUNK):
                yield self.source[at:min(end, at + CHUNK)]
            return
        with self.source.open("rb") as f:
            f.seek(start)
            left = end - start
            while left > 0 and (data := f.read(min(CHUNK, left))):
                left -= len(data)
                yield data


def _digests(source: Path | bytes) -> tuple[int, str, str]:
    if isinstance(source, bytes):
        return len(source), git_blob_sha1(source), hashlib.sha256(source).hexdigest()
    size = source.stat().st_size
    sha1 = hashlib.sha1(b"blob %d\0" % size)
    sha256 = hashlib.sha256()
    with source.open("rb") as f:
        while data := f.read(1 << 20):
            sha1.update(data)
            sha256.update(data)
    return size, sha1.hexdigest(), sha256.hexdigest()


@dataclass(frozen=True)
class Commit:
    id: str
    files: Mapping[str, Blob]


def commit_id(parent: str, files: Mapping[str, Blob]) -> str:
    listing = "".join(f"{path}\0{files[path].git_sha1}\n" for path in sorted(files))
    return hashlib.sha1(f"parent {parent}\n{listing}".encode()).hexdigest()


@dataclass
class HubRepo:
    """A repository: its commits, its refs (`main` and any others), who may read it, and its faults."""

    repo_id: str
    lfs_threshold: int = LFS_THRESHOLD
    gated: bool = False
    private: bool = False
    commits: dict[str, Commit] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)
    forgotten: set[str] = field(default_factory=set)
    truncated: dict[str, int] = field(default_factory=dict)  # path -> bytes sent before the connection is closed
    corrupted: set[str] = field(default_factory=set)  # paths served with every byte inverted

    @classmethod
    def from_dir(cls, repo_id: str, root: Path, **kw: object) -> HubRepo:
        repo = cls(repo_id, **kw)  # type: ignore[arg-type]
        repo.commit("main", _read_tree(root.resolve()))
        return repo

    @classmethod
    def from_files(cls, repo_id: str, files: Mapping[str, bytes | Path], **kw: object) -> HubRepo:
        repo = cls(repo_id, **kw)  # type: ignore[arg-type]
        repo.commit("main", files)
        return repo

    def commit(self, ref: str, changed: Mapping[str, bytes | Path | None]) -> str:
        """Make a commit on `ref` (from its head, if any) with `changed` files added, replaced, or (None) removed;
        the ref moves to it, the earlier commit stays served. Returns the new commit's id."""
        parent = self.refs.get(ref, "")
        files = dict(self.commits[parent].files) if parent else {}
        for path, source in changed.items():
            if not valid_path(path):
                raise ValueError(f"{path!r} is not a path inside a repository")
            if source is None:
                files.pop(path, None)
            else:
                files[path] = Blob.of(source, self.lfs_threshold, path)
        if len(files) > MAX_FILES:
            raise ValueError(f"{self.repo_id}: more than {MAX_FILES} files")
        cid = commit_id(parent, files)
        self.commits[cid] = Commit(cid, files)
        self.refs[ref] = cid
        return cid

    move = commit  # the fault's name: a branch moving between a resolve and a fetch

    def forget(self, commit: str) -> None:
        """History rewritten: `commit` answers RevisionNotFound from now on."""
        self.forgotten.add(commit)

    def truncate(self, path: str, after: int) -> None:
        self.truncated[path] = after

    def corrupt(self, path: str) -> None:
        self.corrupted.add(path)

    def heal(self) -> None:
        self.truncated.clear()
        self.corrupted.clear()

    def find(self, revision: str) -> Commit | None:
        """The commit a branch, tag or full commit id names now; None when it names none."""
        cid = self.refs.get(revision) or (revision if COMMIT.fullmatch(revision) else "")
        if not cid or cid in self.forgotten:
            return None
        return self.commits.get(cid)

    @property
    def head(self) -> str:
        return self.refs["main"]


def _read_tree(root: Path) -> dict[str, bytes | Path]:
    """The regular files under `root`, by their path relative to it; a link, or a name the hub would not accept,
    is an error (the stand-in serves nothing outside the directory)."""
    if not root.is_dir():
        raise ValueError(f"{root} is not a directory")
    files: dict[str, bytes | Path] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != ".git")
        for name in sorted(filenames):
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            if full.is_symlink() or not full.is_file():
                raise ValueError(f"{full} is not a regular file (links are not served)")
            if not valid_path(rel):
                raise ValueError(f"{rel!r} is not a path the hub serves")
            files[rel] = full
    if len(files) > MAX_FILES:
        raise ValueError(f"{root}: more than {MAX_FILES} files")
    return files


def write_sample_model(root: Path, *, shards: int = 2, shard_bytes: int = 1 << 20, bin_too: bool = True,
                       seed: int = 0) -> Path:
    """A model directory as hub repositories hold one: safetensors shards with their index, optionally the same
    weights as pytorch .bin too, config, tokenizer, generation config, and files an engine never needs (a README,
    an `original/` folder, an .onnx export). The shards' bytes are random from `seed`, so a digest is stable."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    names = [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]
    index = {"metadata": {"total_size": shards * shard_bytes}, "weight_map": {f"w{i}": n for i, n in enumerate(names)}}
    files: dict[str, bytes] = {n: rng.randbytes(shard_bytes) for n in names}
    files["model.safetensors.index.json"] = json.dumps(index).encode()
    if bin_too:
        files["pytorch_model.bin"] = rng.randbytes(shard_bytes)
    files |= {
        "config.json": json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}).encode(),
        "generation_config.json": b'{"do_sample": true, "temperature": 0.6}',
        "tokenizer.json": json.dumps({"version": "1.0", "model": {"type": "BPE"}}).encode(),
        "tokenizer_config.json": b'{"bos_token": "<s>", "model_max_length": 4096}',
        "special_tokens_map.json": b'{"bos_token": "<s>"}',
        "README.md": b"# a sample model\n",
        ".gitattributes": b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n",
        "original/params.json": b'{"dim": 8}',
        "onnx/model.onnx": rng.randbytes(4096),
    }
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    return root
