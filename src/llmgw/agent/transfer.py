"""Move one file over HTTP(S) into `<name>.part`: resumed where an earlier attempt (or another source) stopped,
started over when a server ignores the Range asked for, bounded in size and time, hashed as it arrives.

Used for engine archives (installs) and for weights (from an origin or from a peer node). The caller decides what
a whole file is and renames it; nothing here ever gives a partial file its final name.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from yarl import URL

from llmgw.agent import redirects as hops
from llmgw.agent.redirects import PUBLIC_ONLY, GuardedResolver, Redirects
from llmgw.core.errors import TransferFailed
from llmgw.core.reasons import Reason
from llmgw.core.units import mb

CHUNK = 1 << 20
BATCH = 8 << 20  # most bytes gathered while the writer thread is busy
READ_BUFFER = 1 << 20  # what aiohttp reads ahead: larger reads cost fewer turns of the loop (TLS above all)
Progress = Callable[[int, int | None], None]  # (bytes so far, total if known)


def hash_of(path: Path, upto: int | None = None) -> hashlib._Hash:
    h = hashlib.sha256()
    left = upto
    with path.open("rb") as f:
        while chunk := f.read(CHUNK if left is None else min(CHUNK, left)):
            h.update(chunk)
            if left is not None:
                left -= len(chunk)
    return h


@dataclass
class Source:
    """Where bytes come from: a URL, with, for a peer node, the TLS context and the name its certificate bears."""

    url: str
    ssl: ssl.SSLContext | None = None
    server_hostname: str | None = None
    name: str = ""  # how progress and errors name it: "the origin", "peer node02"
    redirects: Redirects | None = PUBLIC_ONLY  # where an origin may send us (its CDN); None: a peer, nowhere
    expect: tuple[str, str] | None = None  # (header, value) the answer must not contradict: a peer's digest
    # sent only to the source's own scheme, host and port: never after a redirect elsewhere (a hub's token is not
    # its CDN's to see), never in a log
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    # asked of every answer from the source's own host, a redirect included, before it is used: raises
    # TransferFailed for one that says something the caller knows how to name (a hub's "no such commit")
    vet: Callable[[int, Mapping[str, str]], None] | None = None

    def said(self) -> str:
        return self.name or self.url

    def quiet(self, words: str) -> str:
        """A server's words without the secrets it was sent (a server or proxy may echo them)."""
        for value in self.headers.values():
            for secret in value.split():
                if len(secret) >= 8:
                    words = words.replace(secret, "<secret>")
        return words


@dataclass
class Result:
    size: int
    sha256: str


Room = Callable[[int], None]  # raises TransferFailed when `n` more bytes cannot be written here


@dataclass(frozen=True)
class MinRate:
    """The least a source must send: `bytes_per_s` on average over every `window` seconds of `now`'s clock."""

    bytes_per_s: float
    window: float
    now: Callable[[], float]

    def check(self, since: tuple[float, int], have: int, what: str) -> tuple[float, int]:
        """The window to measure from next; raises (resumable) when the one that just ended was too slow."""
        t0, b0 = since
        t = self.now()
        if t - t0 < self.window:
            return since
        rate = (have - b0) / (t - t0)
        if rate < self.bytes_per_s:
            raise TransferFailed(Reason.DownloadFailed, f"{what}: {mb(rate)}/s over the last {t - t0:.0f} s, under "
                                 f"the {mb(self.bytes_per_s)}/s a transfer must keep", resumable=True)
        return t, have


async def fetch_part(
    src: Source,
    part: Path,
    *,
    max_bytes: int,
    progress: Progress,
    expected_size: int | None = None,
    room: Room | None = None,
    timeout: float = 60.0,
    deadline: float = 4 * 3600.0,
    min_rate: MinRate | None = None,
) -> Result:
    """Fill `part` with the whole body of `src`, continuing from what `part` already holds. On return `part` holds
    exactly `Result.size` bytes whose digest is `Result.sha256`. An interrupted transfer raises with
    `resumable=True` and keeps `part` for the next call (from this source or another). `expected_size` (the
    catalog's) is held against what the server says; `room` is asked (in a thread) before bytes are written.
    `min_rate`: a source slower than it over its window is left (resumable), so a trickle cannot hold a transfer
    for hours when another source could serve it.
    A server that answers an open range with less than the rest (a CDN capping ranges) is asked for the rest."""
    have = part.stat().st_size if part.exists() else 0
    if have > max_bytes or (expected_size is not None and have > expected_size):
        part.unlink()
        have = 0
    hasher = await asyncio.to_thread(hash_of, part) if have else hashlib.sha256()
    if expected_size is not None and have == expected_size:
        return Result(have, hasher.hexdigest())
    client_timeout = aiohttp.ClientTimeout(total=deadline, connect=timeout, sock_read=timeout)
    name = part.name.removesuffix(".part")
    t = _Transfer(src, part, name, max_bytes, expected_size, room, progress, have, hasher, min_rate)
    guard = GuardedResolver(URL(src.url), src.redirects) if src.redirects is not None else None
    try:
        # the bytes as they are: a body the server compressed would not be the file the catalog describes
        async with aiohttp.ClientSession(timeout=client_timeout, auto_decompress=False, read_bufsize=READ_BUFFER,
                                         connector=aiohttp.TCPConnector(resolver=guard, use_dns_cache=False)
                                         if guard is not None else None) as session:
            async with asyncio.timeout(deadline):
                while not await t.request(session):
                    pass
    except (aiohttp.ClientError, TimeoutError) as e:
        if guard is not None and guard.refused:  # a name a redirect led to is a private address: not retried
            raise TransferFailed(Reason.DownloadFailed, f"{name}: {src.said()} redirected to {guard.refused}: "
                                 "refused") from None
        words = str(e) or type(e).__name__
        have = part.stat().st_size if part.exists() else 0
        raise TransferFailed(Reason.DownloadFailed, f"{name}: the transfer from {src.said()} stopped at {mb(have)} "
                             f"({words[:300]})", resumable=True) from None
    except OSError as e:
        raise TransferFailed.from_os(e, f"cannot write {part}") from None
    finally:
        if guard is not None:  # the connector closes only a resolver of its own making
            await guard.close()
    return Result(t.have, t.hasher.hexdigest())


def _content_range(value: str | None) -> tuple[int, int, int | None] | None:
    """(first, last, total) of "bytes 100-199/200" ("*" total: None); None when it is not that."""
    if not value or not value.startswith("bytes "):
        return None
    span, _, total = value[6:].partition("/")
    first, _, last = span.partition("-")
    if not (first.isdigit() and last.isdigit()) or int(last) < int(first):
        return None
    return int(first), int(last), int(total) if total.isdigit() else None


@dataclass
class _Transfer:
    src: Source
    part: Path
    name: str
    max_bytes: int
    expected: int | None
    room: Room | None
    progress: Progress
    have: int
    hasher: hashlib._Hash
    min_rate: MinRate | None
    total: int | None = None  # the file's whole size, once a server has said it
    open_ended: bool = False  # the last answer was a part of a file whose size the server did not say
    window: tuple[float, int] | None = None  # where the rate is measured from: across requests, not per request

    @contextlib.asynccontextmanager
    async def _answer(self, session: aiohttp.ClientSession, headers: dict[str, str],
                      ) -> AsyncIterator[aiohttp.ClientResponse]:
        """The answer at the end of the redirects the source's rule lets us follow (a 3xx as it is when it lets
        none). A redirect it refuses ends the transfer for good: asking again would be sent there again."""
        src = self.src
        url = URL(src.url)
        home = url.origin()
        for _ in range(hops.MAX_HOPS + 1):
            own = url.origin() == home
            sent = {**headers, **src.headers} if own else headers
            async with session.get(url, headers=sent, ssl=src.ssl if src.ssl is not None else True,
                                   server_hostname=src.server_hostname, allow_redirects=False) as resp:
                if own and src.vet is not None:
                    src.vet(resp.status, resp.headers)
                if src.redirects is None or resp.status not in hops.STATUSES or "Location" not in resp.headers:
                    yield resp
                    return
                try:
                    there = url.join(URL(resp.headers["Location"]))
                except ValueError:
                    there = URL("unreadable:")
                why = src.redirects.refusal(url, there)
                if why:
                    raise TransferFailed(Reason.DownloadFailed, f"{self.name}: {src.said()} redirected to "
                                         f"{hops.words(there)}, {why}: refused")
            url = there
        raise TransferFailed(Reason.DownloadFailed, f"{self.name}: {src.said()} sent more than {hops.MAX_HOPS} "
                             "redirects in a row")

    async def request(self, session: aiohttp.ClientSession) -> bool:
        """One request for what is missing; True once the part holds the whole file."""
        src, have, name = self.src, self.have, self.name
        headers = {"Accept-Encoding": "identity", **({"Range": f"bytes={have}-"} if have else {})}
        async with self._answer(session, headers) as resp:
            if resp.status == 416 and have:
                return self._past_the_end(resp)
            span = self._check_answer(resp)
            if resp.status == 200 and have:  # the server does not resume: start over, from a clean file
                have, self.hasher, self.window = 0, hashlib.sha256(), None
            total, end = self._sizes(resp, have, span)
            if self.room is not None and total is not None:
                await asyncio.to_thread(self.room, total - have)
            room = self.room if total is None else None  # an unknown size: room asked as bytes arrive
            if self.min_rate is not None and self.window is None:
                self.window = (self.min_rate.now(), have)
            self.have = have = await _receive(resp, self.part, have, self.hasher, self.max_bytes, self.progress,
                                              total, end, f"{name} from {src.said()}", room, self)
            if end is not None and have < end:
                raise TransferFailed(Reason.DownloadFailed, f"{name}: the transfer from {src.said()} stopped at "
                                     f"{mb(have)} of {mb(total or end)}", resumable=True)
            # a part of a file of unsaid size: ask for what follows until the server says there is no more
            self.open_ended = resp.status == 206 and total is None
            return not self.open_ended and (total is None or have >= total)

    def _past_the_end(self, resp: aiohttp.ClientResponse) -> bool:
        """A 416 to a resumed request: what we have is all there is, if the server says the file is that long;
        otherwise the part is thrown away and the next attempt starts over."""
        have = self.have
        told = resp.headers.get("Content-Range", "")
        size = int(told[8:]) if told.startswith("bytes */") and told[8:].isdigit() else None
        said_end = size == have or (size is None and self.open_ended)  # "*": the end is where 416 starts
        if said_end and self.expected in (None, have):
            return True
        self.part.unlink(missing_ok=True)
        raise TransferFailed(Reason.DownloadFailed, f"{self.src.said()} says {self.name} ends before the {mb(have)} "
                             f"already here ({told[:60] or 'no Content-Range'}): starting over", resumable=True)

    def _check_answer(self, resp: aiohttp.ClientResponse) -> tuple[int, int, int | None] | None:
        """Refuse an answer that is not the bytes asked for; its Content-Range when it has one."""
        src, name = self.src, self.name
        if resp.status not in (200, 206):
            raise TransferFailed(Reason.DownloadFailed, f"{src.said()} answered {resp.status} "
                                 f"{src.quiet(resp.reason or '')[:200]}".strip(), resumable=resp.status >= 500)
        told_digest = resp.headers.get(src.expect[0]) if src.expect else None
        if src.expect and told_digest and told_digest != src.expect[1]:  # not a byte of another version
            raise TransferFailed(Reason.DigestMismatch, f"{src.said()} holds another {name} (sha256 "
                                 f"{told_digest[:64]}), not the one the catalog names")
        if resp.headers.get("Content-Encoding", "identity").lower() != "identity":
            raise TransferFailed(Reason.DownloadFailed, f"{src.said()} sent {name} encoded "
                                 f"({resp.headers['Content-Encoding'][:40]}), though asked for the bytes as they "
                                 "are", resumable=True)
        span = _content_range(resp.headers.get("Content-Range"))
        if resp.status == 206 and (span is None or span[0] != self.have):
            self.part.unlink(missing_ok=True)  # a range it was not asked for: ask again, whole, next time
            raise TransferFailed(Reason.DownloadFailed, f"{src.said()} answered a range it was not asked for",
                                 resumable=True)
        return span

    def _sizes(self, resp: aiohttp.ClientResponse, have: int, span: tuple[int, int, int | None] | None,
               ) -> tuple[int | None, int | None]:
        """(the file's whole size, where this answer ends), when said; a size that changed, is not the catalog's or
        is over the bound is refused. Records the size as the file's."""
        src, name = self.src, self.name
        length = resp.content_length
        total: int | None
        end: int | None
        if resp.status == 206 and span is not None:
            if length is not None and length != span[1] - span[0] + 1:
                raise TransferFailed(Reason.DownloadFailed, f"{src.said()}'s Content-Length and Content-Range "
                                     "disagree", resumable=True)
            total, end = span[2], span[1] + 1
        else:
            total = have + length if length is not None else None
            end = total
        total = total if total is not None else self.expected
        if self.total is not None and total is not None and total != self.total:
            raise TransferFailed(Reason.SizeMismatch, f"{src.said()} said {name} was {self.total} bytes, now "
                                 f"{total}")
        self.total = total
        if total is not None and self.expected is not None and total != self.expected:
            raise TransferFailed(Reason.SizeMismatch, f"{src.said()} serves {name} as {total} bytes; the "
                                 f"catalog says {self.expected}")
        if total is not None and total > self.max_bytes:
            raise TransferFailed(Reason.DownloadFailed, f"{name} is {mb(total)}, more than the "
                                 f"{mb(self.max_bytes)} allowed")
        return total, end


async def _chunks(content: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    """The body in chunks; when the connection breaks, what had arrived before the break comes first (aiohttp
    raises at once and would drop it, and those bytes are kept for the next attempt to resume after)."""
    try:
        async for chunk in content.iter_chunked(CHUNK):
            yield chunk
    except aiohttp.ClientPayloadError:
        salvage: Callable[[int], bytes] | None = getattr(content, "_read_nowait", None)  # private: may go
        if salvage is not None and (rest := salvage(-1)):
            yield rest
        raise


async def _receive(resp: aiohttp.ClientResponse, part: Path, have: int, hasher: hashlib._Hash, max_bytes: int,
                   progress: Progress, total: int | None, end: int | None, name: str, room: Room | None,
                   rate: _Transfer) -> int:
    """Write and hash the body in a thread while the next chunk arrives: the event loop (heartbeats, the other
    transfers) is never held by a disk or a digest."""
    with part.open("r+b" if have else "wb") as f:
        f.truncate(have)
        f.seek(have)
        progress(have, total)

        def sink(batch: list[bytes]) -> None:
            if room is not None:
                room(sum(len(c) for c in batch))
            f.writelines(batch)
            for chunk in batch:
                hasher.update(chunk)

        # chunks arrive in tens of kilobytes: they are handed to the thread in batches, the next one gathered
        # while the thread writes the last, so a thread hop is paid per batch and not per chunk
        pending: asyncio.Future[None] | None = None
        batch: list[bytes] = []
        batched = 0
        try:
            async for chunk in _chunks(resp.content):
                have += len(chunk)
                if rate.min_rate is not None and rate.window is not None:
                    rate.window = rate.min_rate.check(rate.window, have, name)
                if have > max_bytes or (end is not None and have > end):
                    if pending is not None:
                        await pending
                        pending = None
                    batch = []
                    f.close()
                    part.unlink(missing_ok=True)  # resuming it would only grow it further
                    limit = f"the {mb(end)} announced" if end is not None and end <= max_bytes else (
                        f"the {mb(max_bytes)} allowed")
                    raise TransferFailed(Reason.SizeMismatch, f"{name} grew past {limit}")
                batch.append(chunk)
                batched += len(chunk)
                if pending is not None and (pending.done() or batched >= BATCH):
                    await pending
                    pending = None
                if pending is None:
                    pending = asyncio.ensure_future(asyncio.to_thread(sink, batch))
                    batch, batched = [], 0
                    progress(have, total)
        finally:
            if pending is not None:
                await asyncio.shield(pending)  # a write in flight ends before the file is closed
            if batch:  # what arrived before a break is kept, for the next attempt to resume after
                # said before it is written, as every batch is: another transfer making room meanwhile must not
                # count these bytes both on the disk and still to come
                progress(have, total)
                with contextlib.suppress(TransferFailed):  # unless there is no room for it
                    sink(batch)
        progress(have, total)
        f.flush()
    return have
