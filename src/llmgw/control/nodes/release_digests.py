"""Each engine release's digest list, read by the control plane for the whole fleet: the nodes read none.

A default llama.cpp source names its release's API address (`digests_url`) rather than digests (the machines a
release of llmgw is made on cannot reach GitHub). Were every node to read it, a fleet behind one NAT would exhaust
GitHub's unauthenticated budget (about 60 requests an hour per address) and its nodes would stay without a build.
So the control plane reads each list once per period (re-read only while a file it needs is missing from it), with
back-off after a failure, and sends each variant's digest in the sources of the desired state. A digest it cannot
learn (the list does not name the file, or cannot be read after a few tries) is sent as unknown, with why: the node
passes that build over for the next (DigestUnknown), never left with none. Until its first read the sources say
pending, and the nodes wait rather than fall back.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

import aiohttp

from llmgw.core.backoff import doubling
from llmgw.core.clock import Clock
from llmgw.core.errors import InstallRefused
from llmgw.wire.digest_lists import LIST_MAX, digest_for, listed, shown
from llmgw.wire.engines import EngineSource, EngineVariant

log = logging.getLogger(__name__)

PERIOD_S = 6 * 3600.0  # a list that named every file needed is not read again sooner (release assets do not change)
MISSING_S = 900.0  # a list that lacks a file needed is read again this often (an asset uploaded late)
RETRY_FIRST_S = 30.0
RETRY_MAX_S = 900.0
TRIES_BEFORE_UNKNOWN = 3  # failed reads before the nodes are told to pass the builds over (not a blip at start)
READ_TIMEOUT_S = 30.0

Reader = Callable[[str], Awaitable[bytes]]


async def read_list(url: str) -> bytes:
    """The list's bytes, at most LIST_MAX, within READ_TIMEOUT_S; the list's own words on failure."""
    timeout = aiohttp.ClientTimeout(total=READ_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as http, http.get(
            url, headers={"Accept": "application/vnd.github+json"}) as r:
        if r.status != 200:
            raise OSError(f"answered {r.status}")
        data = await r.content.read(LIST_MAX + 1)
        if len(data) > LIST_MAX:
            raise OSError(f"more than {LIST_MAX} bytes")
        return data


@dataclass
class _List:
    assets: dict[str, str] | None = None  # the last list read whole
    failure: str = ""  # why the last read failed
    tries: int = 0  # failed reads in a row
    due: float = float("-inf")
    reads: int = 0


class ReleaseDigests:
    def __init__(self, clock: Clock, read: Reader = read_list) -> None:
        self.clock, self.read = clock, read
        self._lists: dict[str, _List] = {}
        self.version = 0  # changes whenever what fill() gives may have

    def wanted(self, sources: Iterable[EngineSource]) -> set[str]:
        return {s.digests_url for s in sources if s.digests_url and any(v.unpinned for v in s.variants)}

    async def tick(self, sources: list[EngineSource], needed: Iterable[str]) -> float:
        """Read each list that is due, of the engines `needed` (some node has it to install): a list nobody needs is
        never read, so a cluster whose nodes run named or simulated engines reaches no publisher. The seconds until
        the next is due (PERIOD_S when none waits)."""
        wanted, names = self.wanted(sources), set(needed)
        for url in [u for u in self._lists if u not in wanted]:
            del self._lists[url]
        for url in sorted(self.wanted(s for s in sources if s.name in names)):
            entry = self._lists.setdefault(url, _List())
            if entry.due <= self.clock.monotonic():
                await self._read(url, entry, [s for s in sources if s.digests_url == url])
        now = self.clock.monotonic()
        return max(0.0, min((e.due - now for e in self._lists.values()), default=PERIOD_S))

    async def _read(self, url: str, entry: _List, sources: list[EngineSource]) -> None:
        now = self.clock.monotonic()
        entry.reads += 1
        try:
            assets = listed(await self.read(url), url)
        except (InstallRefused, OSError, aiohttp.ClientError, TimeoutError) as e:
            entry.tries += 1
            entry.failure = f"{type(e).__name__}: {e}" if not isinstance(e, InstallRefused) else str(e)
            entry.due = now + doubling(RETRY_FIRST_S, RETRY_MAX_S, entry.tries - 1)
            log.warning("the digest list at %s could not be read (%d in a row): %s", shown(url), entry.tries,
                        entry.failure)
        else:
            entry.assets, entry.failure, entry.tries = assets, "", 0
            missing = any(self._unknown(v, entry, url) for s in sources for v in s.variants if v.unpinned)
            entry.due = now + (MISSING_S if missing else PERIOD_S)
        self.version += 1

    def reads(self, url: str) -> int:
        """How many times the list at `url` was read (the tests count them)."""
        e = self._lists.get(url)
        return e.reads if e else 0

    def fill(self, sources: list[EngineSource]) -> list[EngineSource]:
        """The sources as nodes are sent them: each digest the lists give filled in, the rest unknown with why, or
        pending while a list has not been read yet."""
        return [self._filled(s) for s in sources]

    def _filled(self, s: EngineSource) -> EngineSource:
        if not s.digests_url or not any(v.unpinned for v in s.variants):
            return s
        entry = self._lists.get(s.digests_url)
        if entry is None or (entry.assets is None and entry.tries < TRIES_BEFORE_UNKNOWN):
            return s.model_copy(update={"digests_pending": True})
        variants, unknown = [], {}
        for v in s.variants:
            if not v.unpinned:
                variants.append(v)
            elif (why := self._unknown(v, entry, s.digests_url)) is not None:
                variants.append(v)
                unknown[v.variant] = why
            else:
                assert entry.assets is not None
                variants.append(v.model_copy(update={
                    "sha256": v.sha256 or digest_for(entry.assets, v.url, s.digests_url),
                    "runtime_sha256": v.runtime_sha256 or (digest_for(entry.assets, v.runtime_url, s.digests_url)
                                                           if v.runtime_url else "")}))
        return s.model_copy(update={"variants": variants, "digests_unknown": unknown})

    @staticmethod
    def _unknown(v: EngineVariant, entry: _List, url: str) -> str | None:
        """Why this variant's digests cannot be given (None: they can)."""
        if entry.assets is None:
            return (f"the control plane cannot read the release's digest list at {shown(url)} ({entry.tries} tries: "
                    f"{entry.failure[:300]}): {v.variant} is not installed without its sha256")
        try:
            for u in (v.url, v.runtime_url):
                if u:
                    digest_for(entry.assets, u, url)
        except InstallRefused as e:
            return str(e)
        return None
