"""The sha256 of an archive the operator did not pin, where the control plane did not send it (an older one): read
from its release's list of assets (wire/digest_lists.py) under the downloads' rules (bounded in size and time,
redirects as for the archives) once per attempt. A control plane of wire version 13 reads the lists for the fleet
and sends the digests, or says which it could not learn (the node passes those builds over)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from llmgw.agent.redirects import PUBLIC_ONLY, Redirects, words
from llmgw.agent.transfer import Source, fetch_part
from llmgw.core.errors import InstallRefused, TransferFailed
from llmgw.core.reasons import Reason
from llmgw.wire.digest_lists import LIST_MAX, digest_for, listed
from llmgw.wire.engines import EngineSource, EngineVariant

LIST_TIMEOUT = 30.0
LIST_DEADLINE = 120.0


@dataclass(frozen=True)
class Pinned:
    """The digests an attempt checks its downloads against: the operator's, or the release's list's."""

    sha256: str
    runtime_sha256: str = ""


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
