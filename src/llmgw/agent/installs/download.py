"""Download a release archive: resumed where an earlier attempt stopped, written under a temporary name, checked
against the published sha256, and only then renamed to its own name. A half file never has a whole file's name."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import aiohttp

from llmgw.core.errors import InstallRefused
from llmgw.core.reasons import Reason

CHUNK = 1 << 20
Progress = Callable[[int, int | None], None]  # (bytes so far, total if the server said)


def mb(n: int) -> str:
    if n >= 1e6:
        return f"{n / 1e6:.0f} MB"
    return f"{n / 1e3:.0f} kB" if n >= 1e3 else f"{n} bytes"


def _hash_of(path: Path) -> hashlib._Hash:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h


def _resumed_at(content_range: str | None) -> int | None:
    """The first byte a 206 answer starts at ("bytes 100-199/200"), or None if it does not say."""
    if not content_range or not content_range.startswith("bytes "):
        return None
    first = content_range[6:].split("-", 1)[0]
    return int(first) if first.isdigit() else None


async def download(
    url: str,
    dest: Path,
    sha256: str,
    progress: Progress,
    max_bytes: int,
    timeout: float = 60.0,
    deadline: float = 4 * 3600.0,
) -> Path:
    """`dest` once it holds exactly the published bytes. An interrupted download stays as `dest.part` and the next
    call resumes it; a finished one whose digest is wrong is deleted (resuming it would only grow the wrong file).
    `timeout` bounds each wait for bytes, `deadline` the whole download (a server sending a byte a minute)."""
    if dest.exists() and (await asyncio.to_thread(_hash_of, dest)).hexdigest() == sha256:
        return dest
    part = dest.with_name(dest.name + ".part")
    have = part.stat().st_size if part.exists() else 0
    if have >= max_bytes:
        part.unlink()
        have = 0
    headers = {"Range": f"bytes={have}-"} if have else {}
    client_timeout = aiohttp.ClientTimeout(total=deadline, connect=timeout, sock_read=timeout)
    try:
        async with aiohttp.ClientSession(timeout=client_timeout) as session, session.get(url, headers=headers) as resp:
            if resp.status == 416 and have:  # asked past the end: what we have is all there is; check it below
                total: int | None = have
            elif resp.status not in (200, 206):
                raise InstallRefused(Reason.DownloadFailed, f"{url} answered {resp.status} {resp.reason or ''}".strip())
            else:
                if resp.status == 200 or _resumed_at(resp.headers.get("Content-Range")) != have:
                    if resp.status == 206:  # a range it was not asked for: ask again, whole, next time
                        part.unlink(missing_ok=True)
                        raise InstallRefused(Reason.DownloadFailed, f"{url} answered a range it was not asked for")
                    have = 0  # the server does not resume: start over
                length = resp.content_length
                total = have + length if length is not None else None
                if total is not None and total > max_bytes:
                    raise InstallRefused(Reason.DownloadFailed,
                                         f"{dest.name} is {mb(total)}, more than the {mb(max_bytes)} allowed")
                with part.open("r+b" if have else "wb") as f:
                    f.truncate(have)
                    f.seek(have)
                    progress(have, total)
                    async for chunk in resp.content.iter_chunked(CHUNK):
                        have += len(chunk)
                        if have > max_bytes:
                            f.close()
                            part.unlink(missing_ok=True)  # resuming it would only grow it further
                            raise InstallRefused(Reason.DownloadFailed,
                                                 f"{dest.name} grew past the {mb(max_bytes)} allowed")
                        f.write(chunk)
                        progress(have, total)
                if total is not None and have < total:
                    raise InstallRefused(Reason.DownloadFailed,
                                         f"{dest.name}: the download stopped at {mb(have)} of {mb(total)}")
    except (aiohttp.ClientError, TimeoutError) as e:
        words = str(e) or type(e).__name__
        raise InstallRefused(Reason.DownloadFailed,
                             f"{dest.name}: the download stopped at {mb(have)} ({words}); the next attempt resumes it"
                             ) from None
    except OSError as e:
        raise InstallRefused.from_os(e, f"cannot write {part}", Reason.DownloadFailed) from None
    got = (await asyncio.to_thread(_hash_of, part)).hexdigest()
    if got != sha256:
        part.unlink(missing_ok=True)
        raise InstallRefused(Reason.DigestMismatch,
                             f"{dest.name}: sha256 is {got}, the published digest is {sha256}; not used")
    os.replace(part, dest)
    return dest
