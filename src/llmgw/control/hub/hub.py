"""A hub source's revision resolved to one commit and the files an engine needs, by asking the hub (or a mirror of
its API) once through huggingface_hub; the library's errors become `HubFailed` with a Reason and words an operator
can act on. `choose_files` is the pure rule of which files those are.

Weights come in one format, from the repository's top level: `model*.safetensors` (or, when there are none, every
top-level `*.safetensors`) with their index; else `pytorch_model*.bin` with theirs. Never other formats (.gguf,
.onnx, .h5, .msgpack, .ot, .pt) nor anything in a folder (`original/`, `onnx/`). Beside them: config, tokenizer and
generation config files (`ENGINE_FILES`, `*.tiktoken`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import httpx2
from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_url
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.hf_api import ModelInfo, RepoSibling
from pydantic import ValidationError

from llmgw.control.hub import hub_http
from llmgw.core.errors import HubFailed
from llmgw.core.reasons import Reason
from llmgw.wire.hub import COMMIT, MAX_BYTES, MAX_FILES, HubFile, HubRef, Resolution, clash, valid_path

log = logging.getLogger(__name__)
hub_http.install()  # every answer bounded, before the library's first request

ENGINE_FILES = frozenset({
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "tokenizer.model",
    "special_tokens_map.json", "vocab.json", "merges.txt", "added_tokens.json", "chat_template.jinja",
    "chat_template.json", "preprocessor_config.json",
})
MAX_SIBLINGS = 100_000  # a listing longer than this is not a model repository's (and not read further)
TOKEN_FILE = "hub.token_file in server.yaml"
TOKEN_HINT = f"give the control plane and nodes a token: {TOKEN_FILE}"


def resolve(ref: HubRef, endpoint: str, token: str | None, timeout: float) -> Resolution:
    """Ask the hub at `endpoint` which commit `ref` names now and which of its files an engine needs, and for a gated
    or private repository whether the token opens its files. Blocking (one HTTP request, two for a gated one);
    HubFailed when the hub does not say."""
    try:
        return _resolve(ref, endpoint, token, timeout)
    except HubFailed as f:
        # the hub's words are shown to whoever reads the model's state; a hub (or a proxy) may echo the token
        if token and token in str(f):
            raise HubFailed(f.reason, str(f).replace(token, "<the hub token>")) from None
        raise


def _resolve(ref: HubRef, endpoint: str, token: str | None, timeout: float) -> Resolution:
    # token=False, not None: the library would otherwise pick a token up from the environment or ~/.cache
    api = HfApi(endpoint=endpoint, token=token or False)
    try:
        info = api.model_info(ref.repo, revision=ref.revision, files_metadata=True, timeout=timeout)
    except Exception as e:  # the library's and its HTTP client's errors, translated at this one boundary
        raise _failed(e, ref, endpoint, token, timeout) from e
    try:
        commit = _commit_of(info, ref, endpoint)
        try:
            files = choose_files(info.siblings or ())
        except ValueError as e:
            raise HubFailed(Reason.NoWeightsFiles, f"{ref.repo}@{commit[:12]}: {e}") from e
    except (TypeError, AttributeError) as e:  # the library reads a value of any JSON type where a string belongs
        raise HubFailed(Reason.HubUnreachable, f"the hub at {endpoint} answered for {ref.repo} not as a hub does "
                                               f"({type(e).__name__}: {e})"[:400]) from e
    gated = bool(info.gated) or bool(info.private)
    if gated:
        _check_access(ref, commit, files[0].path, endpoint, token, timeout)
    return Resolution(ref.repo, ref.revision, commit, files, gated=gated)


def _check_access(ref: HubRef, commit: str, path: str, endpoint: str, token: str | None, timeout: float) -> None:
    """A gated repository shows its file list to anyone, its files only to a token whose account accepted its terms:
    one HEAD of a file tells now, not when every node's fetch fails."""
    if not token:
        raise HubFailed(Reason.HubAccessDenied, f"{ref.repo} is gated; {TOKEN_HINT}")
    url = hf_hub_url(ref.repo, path, revision=commit, endpoint=endpoint)
    try:
        get_hf_file_metadata(url, token=token, timeout=timeout)
    except Exception as e:  # as above: translated here
        raise _failed(e, ref, endpoint, token, timeout) from e


def _commit_of(info: ModelInfo, ref: HubRef, endpoint: str) -> str:
    sha = info.sha or ""
    if not COMMIT.fullmatch(sha):
        raise HubFailed(Reason.HubUnreachable, f"the hub at {endpoint} answered for {ref.source()} without a commit "
                                               f"id ({sha[:60]!r}): is it the hub, or a mirror of its API?")
    if ref.pinned and sha != ref.revision:
        raise HubFailed(Reason.HubUnreachable, f"the hub at {endpoint} answered for commit {ref.revision} with "
                                               f"another one, {sha}")
    return sha


def _failed(e: Exception, ref: HubRef, endpoint: str, token: str | None, timeout: float) -> HubFailed:
    """The library's error for one model_info call, as a Reason and words that say what to do."""
    if isinstance(e, GatedRepoError):
        words = TOKEN_HINT if not token else "the hub refused the token (has its account accepted the terms?)"
        return HubFailed(Reason.HubAccessDenied, f"{ref.repo} is gated; {words}")
    if isinstance(e, RepositoryNotFoundError):
        words = f" (a private one needs a token: {TOKEN_FILE})" if not token else " that the token can see"
        return HubFailed(Reason.HubNotFound, f"the hub at {endpoint} has no repository {ref.repo}{words}")
    if isinstance(e, RevisionNotFoundError):
        return HubFailed(Reason.HubNotFound, f"{ref.repo} has no revision {ref.revision!r} on the hub at {endpoint}")
    if isinstance(e, HfHubHTTPError) and e.response is not None:
        status = e.response.status_code
        said = (e.server_message or e.response.reason_phrase or "").strip()[:200]
        if status in (401, 403):
            words = "the hub refused the token" if token else f"the hub asks for a token; {TOKEN_HINT}"
            return HubFailed(Reason.HubAccessDenied, f"{ref.repo}: {words} ({status} {said})")
        return HubFailed(Reason.HubUnreachable, f"the hub at {endpoint} answered {status} {said} for {ref.repo}")
    if isinstance(e, httpx2.TimeoutException):
        return HubFailed(Reason.HubUnreachable, f"the hub at {endpoint} did not answer within {timeout:g}s")
    if isinstance(e, OfflineModeIsEnabled):
        return HubFailed(Reason.HubUnreachable, "HF_HUB_OFFLINE is set in the control plane's environment")
    if isinstance(e, (httpx2.TransportError, OSError)):
        return HubFailed(Reason.HubUnreachable, f"the hub at {endpoint} could not be reached: {e}"[:400])
    if isinstance(e, (ValueError, KeyError, TypeError)):  # an answer that is not the hub's JSON
        return HubFailed(Reason.HubUnreachable, f"the hub at {endpoint} answered for {ref.repo} not as a hub does "
                                                f"({type(e).__name__}: {e})"[:400])
    raise e


def _format(path: str) -> str:
    """Which weights format a top-level file is in: "safetensors", "bin", or "" when it is no weights file."""
    if path.endswith(".safetensors") or path == "model.safetensors.index.json":
        return "safetensors"
    if path.startswith("pytorch_model") and (path.endswith(".bin") or path == "pytorch_model.bin.index.json"):
        return "bin"
    return ""


def _is_weights(path: str, fmt: str, prefer_model: bool) -> bool:
    if _format(path) != fmt:
        return False
    # beside HF-named shards a repository may hold the same weights again (Mistral's consolidated.safetensors)
    return not (fmt == "safetensors" and prefer_model and not path.startswith("model"))


def choose_files(siblings: Sequence[RepoSibling]) -> tuple[HubFile, ...]:
    """The files of a repository's listing an engine needs: weights in one format and the metadata beside them, each
    with its size and digest. ValueError, naming the file, when there are no weights, too many files, a weights file
    with a path no node would write, or a chosen file the hub gave no size or digest for."""
    if len(siblings) > MAX_SIBLINGS:
        raise ValueError(f"the listing has {len(siblings)} files, more than {MAX_SIBLINGS}")
    top = [s for s in siblings if "/" not in s.rfilename]
    fmt = next((f for f in ("safetensors", "bin")
                if any(_format(s.rfilename) == f and not s.rfilename.endswith(".json") for s in top)), "")
    if not fmt:
        names = ", ".join(sorted(s.rfilename for s in siblings)[:12])
        raise ValueError(f"no weights an engine reads (top-level *.safetensors or pytorch_model*.bin); it has: {names}")
    prefer_model = any(s.rfilename.startswith("model") and s.rfilename.endswith(".safetensors") for s in top)
    chosen = []
    for s in top:
        weights = _is_weights(s.rfilename, fmt, prefer_model)
        if not weights and s.rfilename not in ENGINE_FILES and not s.rfilename.endswith(".tiktoken"):
            continue
        if not valid_path(s.rfilename):
            if weights:
                raise ValueError(f"weights file {s.rfilename[:200]!r} has a path no node would write")
            log.warning("hub file %r skipped: not a path a node would write", s.rfilename[:200])
            continue
        chosen.append(_hub_file(s))
    clashing = clash([f.path for f in chosen])
    if clashing:
        raise ValueError(f"the listing names {clashing[:200]!r} twice")
    if sum(f.size for f in chosen) > MAX_BYTES:
        raise ValueError(f"its files come to {sum(f.size for f in chosen)} bytes, more than {MAX_BYTES}")
    if len(chosen) > MAX_FILES:
        raise ValueError(f"{len(chosen)} files to fetch, more than {MAX_FILES}")
    return tuple(sorted(chosen, key=lambda f: f.path))


def _hub_file(s: RepoSibling) -> HubFile:
    if s.size is None or (s.lfs is None and not s.blob_id):
        raise ValueError(f"the hub gave no size or digest for {s.rfilename!r}")
    if s.lfs is not None and s.lfs.size != s.size:
        raise ValueError(f"the hub gave {s.rfilename} two sizes, {s.size} bytes and {s.lfs.size}"[:300])
    # a digest is the same in capitals (a mirror may spell it so); the nodes compare it as the hash gives it
    sha256, git_sha1 = (s.lfs.sha256.lower(), "") if s.lfs is not None else ("", (s.blob_id or "").lower())
    try:
        return HubFile(path=s.rfilename, size=s.size, sha256=sha256, git_sha1=git_sha1)
    except ValidationError:  # its words, not pydantic's: a line an operator reads in `ctl status`
        raise ValueError(f"the hub gave {s.rfilename} size {s.size} and digest {(sha256 or git_sha1)[:80]!r}: "
                         "no file has them"[:300]) from None
