"""The sha256 of an archive the operator did not pin, read from its release's list of assets (GitHub's release API:
`assets[].name`, `assets[].digest` = "sha256:<hex>"). The list is fetched under the downloads' rules (bounded in
size and time, redirects as for the archives) once per attempt, and a file it does not name, or names without a
sha256, is not installed: `DigestUnknown`."""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from llmgw.agent.redirects import PUBLIC_ONLY, Redirects, words
from llmgw.agent.transfer import Source, fetch_part
from llmgw.core.errors import InstallRefused, TransferFailed
from llmgw.core.reasons import Reason
from llmgw.wire.engines import EngineSource, EngineVariant

LIST_MAX = 4 << 20  # llama.cpp's release, 40 assets with their uploaders, is about 100 kB
LIST_TIMEOUT = 30.0
LIST_DEADLINE = 120.0
_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")


@dataclass(frozen=True)
class Pinned:
    """The digests an attempt checks its downloads against: the operator's, or the release's list's."""

    sha256: str
    runtime_sha256: str = ""


def file_name(url: str) -> str:
    """The file name a URL ends in, as a release lists its assets."""
    return os.path.basename(unquote(urlparse(url).path))


async def read_list(url: str, work: Path, redirects: Redirects = PUBLIC_ONLY) -> bytes:
    """The list's bytes, at most LIST_MAX, through a file under `work` that is gone when this returns."""
    part = work / f".digests-{hashlib.sha256(url.encode()).hexdigest()[:16]}.json.part"
    part.unlink(missing_ok=True)  # never resumed: the list is read whole, each attempt
    try:
        await fetch_part(Source(url, redirects=redirects), part, max_bytes=LIST_MAX, progress=lambda d, t: None,
                         timeout=LIST_TIMEOUT, deadline=LIST_DEADLINE)
        return part.read_bytes()
    except TransferFailed as e:
        raise InstallRefused(Reason.DigestUnknown, f"cannot read the release's digest list at {words(url)}: "
                             f"{str(e)[:400]}") from None
    except OSError as e:
        raise InstallRefused.from_os(e, f"cannot keep the digest list from {words(url)} in {work}") from None
    finally:
        part.unlink(missing_ok=True)


def listed(data: bytes, url: str) -> dict[str, str]:
    """Each asset's name and its `digest` as given ("" when it gives none), from a release's JSON."""
    try:
        release = json.loads(data)
    except (ValueError, RecursionError):
        raise InstallRefused(Reason.DigestUnknown, f"the digest list at {words(url)} is not JSON") from None
    assets = release.get("assets") if isinstance(release, dict) else None
    if not isinstance(assets, list):
        raise InstallRefused(Reason.DigestUnknown, f"the digest list at {words(url)} has no assets list (expected a "
                             "release as GitHub's API gives it)")
    out: dict[str, str] = {}
    for a in assets:
        if isinstance(a, dict) and isinstance(a.get("name"), str):
            digest = a.get("digest")
            out.setdefault(a["name"], digest if isinstance(digest, str) else "")
    return out


def digest_for(assets: dict[str, str], file_url: str, list_url: str) -> str:
    """The sha256 the list gives the file `file_url` names; "sha256:" and 64 lowercase hex, nothing else."""
    name = file_name(file_url)
    if name not in assets:
        raise InstallRefused(Reason.DigestUnknown, f"{name[:200]} is not among the assets the digest list at "
                             f"{words(list_url)} names: its sha256 is unknown, so it is not installed")
    m = _DIGEST.fullmatch(assets[name])  # not match: `$` passes a newline after the hex
    if m is None:
        given = assets[name][:80] or "none"
        raise InstallRefused(Reason.DigestUnknown, f"the digest list at {words(list_url)} gives {name[:200]} no "
                             f"sha256 (its digest: {given!r}): not installed")
    return m.group(1)


async def pinned(source: EngineSource, variant: EngineVariant, work: Path,
                 redirects: Redirects = PUBLIC_ONLY) -> Pinned:
    """The digests for this attempt: the variant's own, and the list's for each it leaves empty (read once)."""
    sha, runtime = variant.sha256, variant.runtime_sha256
    if sha and (runtime or not variant.runtime_url):
        return Pinned(sha, runtime)
    if not source.digests_url:  # the wire model refuses this; an older control plane might not
        raise InstallRefused(Reason.DigestUnknown, f"{variant.variant}: no sha256 and no digest list to read it from")
    assets = listed(await read_list(source.digests_url, work, redirects), source.digests_url)
    sha = sha or digest_for(assets, variant.url, source.digests_url)
    if variant.runtime_url and not runtime:
        runtime = digest_for(assets, variant.runtime_url, source.digests_url)
    return Pinned(sha, runtime)
