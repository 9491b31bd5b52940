"""Download a release archive: resumed where an earlier attempt stopped, written under a temporary name, checked
against the published sha256, and only then renamed to its own name. A half file never has a whole file's name."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from llmgw.agent.redirects import PUBLIC_ONLY, Redirects
from llmgw.agent.transfer import Progress, Source, fetch_part, hash_of
from llmgw.core.errors import InstallRefused, TransferFailed
from llmgw.core.reasons import Reason


async def download(
    url: str,
    dest: Path,
    sha256: str,
    progress: Progress,
    max_bytes: int,
    timeout: float = 60.0,
    deadline: float = 4 * 3600.0,
    redirects: Redirects = PUBLIC_ONLY,
) -> Path:
    """`dest` once it holds exactly the published bytes. An interrupted download stays as `dest.part` and the next
    call resumes it; a finished one whose digest is wrong is deleted (resuming it would only grow the wrong file).
    `timeout` bounds each wait for bytes, `deadline` the whole download (a server sending a byte a minute)."""
    if dest.exists() and (await asyncio.to_thread(hash_of, dest)).hexdigest() == sha256:
        return dest
    part = dest.with_name(dest.name + ".part")
    try:
        got = await fetch_part(Source(url, redirects=redirects), part, max_bytes=max_bytes, progress=progress,
                               timeout=timeout, deadline=deadline)
    except TransferFailed as e:
        words = str(e) + ("; the next attempt resumes it" if e.resumable else "")
        reason = Reason.DownloadFailed if e.reason == Reason.SizeMismatch else e.reason
        raise InstallRefused(reason, words) from None
    if got.sha256 != sha256:
        part.unlink(missing_ok=True)
        raise InstallRefused(Reason.DigestMismatch,
                             f"{dest.name}: sha256 is {got.sha256}, the published digest is {sha256}; not used")
    os.replace(part, dest)
    return dest
