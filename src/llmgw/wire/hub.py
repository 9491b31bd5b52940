"""Models named by a Hugging Face hub id: the source's spelling, and what a resolution of it is.

`hf://org/name` or `hf://org/name@revision` (a branch, a tag or a commit; `main` when none is given). The control
plane resolves a revision to one commit and its file list; from then on every node is told the pinned source,
`hf://org/name@<40 hex of the commit>`, and reports that string in its `weights` once the directory is whole.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated
from urllib.parse import quote

from pydantic import AfterValidator, Field

from llmgw.core.strict import Frozen

HUB_SCHEME = "hf://"
DEFAULT_REVISION = "main"
# what the hub allows in a repository id: an optional namespace, then a name; no "..", no leading or trailing "-.",
# no "--" (the hub refuses it: "org--name" is how a node's directory spells "org/name", one repository's only)
_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
_REPO = re.compile(rf"^(?:{_PART}/)?{_PART}$")
_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,254}$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")
MAX_FILES = 4096  # the most files one model's directory may have (a large sharded checkpoint has a few hundred)
MAX_BYTES = 2**50  # the most bytes one file, or one model's directory in all, may have
# a path inside the repository: relative, "/"-separated, no empty, "." or ".." part, nothing a shell or URL minds
_PATH = re.compile(r"^(?!.*(?:^|/)\.{1,2}(?:/|$))[A-Za-z0-9._+=-]+(?:/[A-Za-z0-9._+=-]+){0,15}$")


@dataclass(frozen=True)
class HubRef:
    repo: str
    revision: str

    @property
    def pinned(self) -> bool:
        """The revision is a commit already: nothing to resolve, nothing that can move."""
        return COMMIT.fullmatch(self.revision) is not None

    def source(self) -> str:
        return f"{HUB_SCHEME}{self.repo}@{self.revision}"


def is_hub(source: str) -> bool:
    return source.startswith(HUB_SCHEME)


def parse_hub(source: str) -> HubRef:
    """The repository and revision a hub source names; ValueError, in words an operator can act on, when it is not
    one."""
    if not is_hub(source):
        raise ValueError(f"{source!r} is not a hub source (hf://org/name[@revision])")
    rest = source[len(HUB_SCHEME):]
    repo, at, revision = rest.partition("@")
    if not _REPO.fullmatch(repo) or ".." in repo or "--" in repo:
        raise ValueError(f"{source!r}: {repo!r} is not a hub repository id (org/name)")
    if at and (not _REVISION.fullmatch(revision) or ".." in revision or revision.endswith("/")):
        raise ValueError(f"{source!r}: {revision!r} is not a revision (a branch, a tag or a commit)")
    return HubRef(repo, revision if at else DEFAULT_REVISION)


def pinned_source(repo: str, commit: str) -> str:
    return f"{HUB_SCHEME}{repo}@{commit}"


def valid_path(path: str) -> bool:
    return len(path) <= 512 and _PATH.fullmatch(path) is not None


def clash(paths: Sequence[str]) -> str:
    """The first path of a directory's file list that another file would take the place of (listed twice, or under
    a file listed as a folder); "" when every file has a place of its own."""
    seen = set(paths)
    if len(seen) < len(paths):
        return next(p for i, p in enumerate(paths) if p in paths[:i])
    return next((p for p in paths if any(p[:i] in seen for i, c in enumerate(p) if c == "/")), "")


def unique_files(files: list[HubFile]) -> list[HubFile]:
    """A file list every file of which a node can lay out: each path once, none inside another file, and no more
    bytes in all than one file may have (a node reports a directory's bytes as one count)."""
    clashing = clash([f.path for f in files])
    if clashing:
        raise ValueError(f"{clashing[:200]!r} is listed twice, or under a file")
    if sum(f.size for f in files) > MAX_BYTES:
        raise ValueError(f"the files come to more than {MAX_BYTES} bytes")
    return files


def _checked_path(path: str) -> str:
    if not valid_path(path):
        raise ValueError(f"{path[:200]!r} is not a relative path inside a repository")
    return path


class HubFile(Frozen):
    """One file of a resolved model: where it sits in the repository, its size, and what proves it whole."""

    path: Annotated[str, AfterValidator(_checked_path)]
    size: int = Field(ge=0, le=MAX_BYTES)
    sha256: str = Field(default="", pattern=r"^([0-9a-f]{64})?$")  # files in large-file storage: the hub gives it
    git_sha1: str = Field(default="", pattern=r"^([0-9a-f]{40})?$")  # the others: their git blob id


def file_url(base_url: str, path: str) -> str:
    """The URL one file of a resolved model is fetched from: `<endpoint>/<repo>/resolve/<commit>/<path>`."""
    return f"{base_url.rstrip('/')}/{quote(path)}"


def resolve_base(endpoint: str, repo: str, commit: str) -> str:
    return f"{endpoint.rstrip('/')}/{repo}/resolve/{commit}"


@dataclass(frozen=True)
class Resolution:
    """A revision resolved: the commit it named when the hub was asked, and the files of that commit an engine needs
    (weights in one format, config, tokenizer, generation config), each with its size and digest."""

    repo: str
    revision: str
    commit: str
    files: tuple[HubFile, ...]
    gated: bool = False  # gated or private: fetching needs the token

    def __post_init__(self) -> None:  # one kept in the store by a release that let a clash through is resolved again
        unique_files(list(self.files))

    @property
    def source(self) -> str:
        """The pinned source every node is told and reports: `hf://org/name@<commit>`."""
        return pinned_source(self.repo, self.commit)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


@dataclass(frozen=True)
class HubState:
    """What the control plane knows of one catalog model's hub source: its resolution, or why there is none (a
    Reason code and the hub's words: HubResolving while the first answer is awaited)."""

    source: str  # as the catalog names it: hf://org/name[@revision]
    resolution: Resolution | None = None
    reason: str = ""
    message: str = ""
    since: float = 0.0  # the injected clock's time of the last answer (or of the first try)
