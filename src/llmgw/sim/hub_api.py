"""The stand-in hub's answers as data: model info, tree listings, which file a resolve URL names, and who may see it.

Access follows the real hub: a token it does not know is refused everywhere; a private repository without a valid
token is not found; a gated one shows its info and file list to anyone but its files only with a valid token.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from llmgw.sim.hub_repo import Blob, Commit, HubRepo

CREATED = "2026-01-01T00:00:00.000Z"


class HubError(Exception):
    """An answer the hub gives as an error: status, its X-Error-Code, its words, the commit when one was found."""

    def __init__(self, status: int, code: str, message: str, commit: str = "") -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.commit = status, code, message, commit


@dataclass(frozen=True)
class ServedFile:
    """One file a request names: its repository, the commit it was found in, its path and content."""

    repo: HubRepo
    commit: str
    path: str
    blob: Blob
    cdn: bool = False


class ApiHandlers:
    def __init__(self, repos: Mapping[str, HubRepo], tokens: frozenset[str]) -> None:
        self.repos = repos
        self.tokens = tokens

    def _token(self, authorization: str) -> str:
        """The token the request carries, if any; a token this hub does not know is refused outright."""
        if not authorization:
            return ""
        token = authorization.removeprefix("Bearer ").strip()
        if token not in self.tokens:
            raise HubError(401, "", "Invalid credentials in Authorization header")
        return token

    def _repo(self, rest: str, authorization: str) -> tuple[HubRepo, str, bool]:
        """The repository `rest` starts with, what follows it, and whether the token opens it."""
        token = self._token(authorization)
        for repo_id in sorted(self.repos, key=len, reverse=True):
            if rest == repo_id or rest.startswith(repo_id + "/"):
                repo = self.repos[repo_id]
                opens = bool(token) and (repo.readers is None or token in repo.readers)
                if repo.private and not opens:
                    break
                return repo, rest[len(repo_id):], opens
        raise HubError(404 if token else 401, "RepoNotFound", "Repository not found")

    @staticmethod
    def _commit(repo: HubRepo, revision: str) -> Commit:
        found = repo.find(revision)
        if found is None:
            raise HubError(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return found

    def answer(self, raw_path: str, query: Mapping[str, str], authorization: str) -> Any:
        """`/api/models/{repo}`, `.../revision/{rev}` (model info) or `.../tree/{rev}` (a listing)."""
        repo, tail, _ = self._repo(raw_path.removeprefix("/api/models/"), authorization)
        kind, _, rest = tail.lstrip("/").partition("/")
        revision, _, sub = rest.partition("/")
        if kind in ("", "revision") and not sub:
            commit = self._commit(repo, unquote(revision) if kind else "main")
            return self.model_info(repo, commit, blobs=query.get("blobs", "").lower() in ("1", "true"))
        if kind == "tree":
            return self.tree(self._commit(repo, unquote(revision)), unquote(sub))
        raise HubError(404, "", "Not Found")

    @staticmethod
    def model_info(repo: HubRepo, commit: Commit, blobs: bool) -> dict[str, Any]:
        return {
            "_id": repo.repo_id, "id": repo.repo_id, "modelId": repo.repo_id, "author": repo.repo_id.split("/")[0],
            "sha": commit.id, "lastModified": CREATED, "createdAt": CREATED, "private": repo.private,
            "gated": "auto" if repo.gated else False, "disabled": False, "downloads": 0, "likes": 0, "tags": [],
            "siblings": [_sibling(path, blob, blobs) for path, blob in sorted(commit.files.items())],
        }

    @staticmethod
    def tree(commit: Commit, under: str) -> list[dict[str, Any]]:
        """A recursive listing of `under` (the whole tree when empty): its folders and files."""
        prefix = f"{under.rstrip('/')}/" if under else ""
        paths = sorted(p for p in commit.files if p.startswith(prefix))
        folders = sorted({"/".join(p.split("/")[:i]) for p in paths for i in range(1, p.count("/") + 1)})
        out: list[dict[str, Any]] = [{"type": "directory", "oid": "0" * 40, "size": 0, "path": f}
                                     for f in folders if f.startswith(prefix)]
        for path in paths:
            b = commit.files[path]
            entry: dict[str, Any] = {"type": "file", "oid": b.git_sha1, "size": b.size, "path": path}
            if b.lfs:
                entry["lfs"] = {"oid": b.sha256, "size": b.size, "pointerSize": b.pointer_size}
            out.append(entry)
        return out

    def resolve_file(self, raw_path: str, authorization: str) -> ServedFile:
        """The file `/{repo}/resolve/{rev}/{path}` names."""
        repo, tail, allowed = self._repo(raw_path.lstrip("/").removesuffix("/"), authorization)
        revision, _, path = tail.removeprefix("/resolve/").partition("/")
        if not tail.startswith("/resolve/") or not path:
            raise HubError(404, "", "Not Found")
        commit = self._commit(repo, unquote(revision))
        if repo.gated and not allowed:
            raise HubError(403 if authorization else 401, "GatedRepo",
                           f"Access to model {repo.repo_id} is restricted: you must be granted access to it")
        blob = commit.files.get(unquote(path))
        if blob is None:
            raise HubError(404, "EntryNotFound", "Entry not found", commit=commit.id)
        return ServedFile(repo, commit.id, unquote(path), blob)


def _sibling(path: str, blob: Blob, blobs: bool) -> dict[str, Any]:
    if not blobs:
        return {"rfilename": path}
    entry: dict[str, Any] = {"rfilename": path, "size": blob.size, "blobId": blob.git_sha1}
    if blob.lfs:
        entry["lfs"] = {"size": blob.size, "sha256": blob.sha256, "pointerSize": blob.pointer_size}
    return entry
